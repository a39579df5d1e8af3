"""The tokenizer saved beside a pretrained model (``data.tokenizer.kind: pretrained``).

``model.pretrained_path`` is the directory ``save_pretrained`` wrote (on the service: a name in the
data directory). Two of its files are read through the workspace, nothing else and never from a hub:

- ``tokenizer.json`` (at most 32 MiB): the tokenizer itself (``tokenizers.Tokenizer.from_str``), as
  every fast tokenizer saves it; truncation and padding saved with it are switched off (the data
  layer cuts);
- ``tokenizer_config.json`` (at most 1 MiB): which tokens play which role. BOS is ``bos_token``, else
  ``cls_token`` (BERT's ``[CLS]``); EOS is ``eos_token``, else ``sep_token`` (BERT's ``[SEP]``); PAD
  is ``pad_token`` or none (GPT-2, Llama).

So BERT gives pad 0, bos 101, eos 102; BART bos 0, pad 1, eos 2; GPT-2 bos = eos = 50256 and no pad.
A classifier needs BOS (its CLS) and PAD, seq2seq BOS, EOS and PAD, causal_lm EOS (between
documents). Every id the tokenizer gives must lie below its size (the model's embedding has that many
rows). Loaded tokenizers are cached per process by the two files' content.
"""

from __future__ import annotations

import hashlib
import json

from tokenizers import Tokenizer

from collapipe_core.config import ExperimentConfig
from collapipe_core.data.errors import DataError
from collapipe_core.data.tokenization import TextTokenizer
from collapipe_core.data.vocab import SpecialIds
from collapipe_core.quote import short
from collapipe_core.workspace import FileRefused, Workspace

FIELD = "model.pretrained_path"
MAX_BYTES = {"tokenizer.json": 32 * 2**20, "tokenizer_config.json": 2**20}
"""Largest tokenizer files read: a 64 MB tokenizer.json (3 M tokens) took 15 s and 880 MB to load."""
ROLES = {"bos": ("bos_token", "cls_token"), "eos": ("eos_token", "sep_token"), "pad": ("pad_token",)}
NEEDED = {"classifier": ("bos", "pad"), "seq2seq": ("bos", "eos", "pad"), "causal_lm": ("eos",)}
_loaded: dict[str, tuple[Tokenizer, dict[str, int | None]]] = {}


def pretrained_tokenizer(config: ExperimentConfig, workspace: Workspace) -> TextTokenizer:
    """The tokenizer in ``model.pretrained_path``, with the special ids the model kind needs."""
    directory = config.model.pretrained_path
    if directory is None:
        raise DataError(
            "data.tokenizer.kind",
            "pretrained",
            "a pretrained tokenizer is read from model.pretrained_path, which is not set; set it to the "
            "directory save_pretrained wrote, or use data.tokenizer.kind bpe or wordpiece",
        )
    tokenizer_json, config_json = _files(workspace, directory)
    key = _digest(tokenizer_json, config_json)
    if key not in _loaded:
        _loaded.clear()  # one pretrained model per process is the common case
        _loaded[key] = _parse(directory, tokenizer_json, config_json)
    tokenizer, ids = _loaded[key]
    missing = [role for role in NEEDED[config.model.kind] if ids[role] is None]
    if missing:
        names = " or ".join(name for role in missing for name in ROLES[role])
        raise DataError(
            FIELD,
            directory,
            f"the tokenizer in {short(directory)} has no {names} in tokenizer_config.json, which a "
            f"{config.model.kind} model needs; set it on the tokenizer (e.g. tokenizer.pad_token = ...) "
            "and save_pretrained again",
        )
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if config.model.vocab_size is not None and config.model.vocab_size < size:
        raise DataError(
            "model.vocab_size",
            config.model.vocab_size,
            f"the tokenizer in {short(directory)} has {size} tokens; set model.vocab_size to at least "
            f"{size} or leave it out",
        )
    vocab = [""] * size
    for token, token_id in tokenizer.get_vocab(with_added_tokens=True).items():
        if token_id < size:
            vocab[token_id] = token
    # Every kind needs BOS or EOS; a role the kind does not use borrows the other's id.
    bos, eos = ids["bos"], ids["eos"]
    bos = eos if bos is None else bos
    eos = bos if eos is None else eos
    assert bos is not None and eos is not None
    return TextTokenizer(tokenizer, SpecialIds(pad=ids["pad"], bos=bos, eos=eos), tuple(vocab))


def tokenizer_files_digest(config: ExperimentConfig, workspace: Workspace) -> str:
    """The digest of the two tokenizer files in ``model.pretrained_path``: what is built from them is
    the same as long as it is."""
    assert config.model.pretrained_path is not None
    return _digest(*_files(workspace, config.model.pretrained_path))


def pretrained_tokenizer_files(config: ExperimentConfig, workspace: Workspace) -> dict[str, bytes]:
    """The two files of the tokenizer in ``model.pretrained_path`` (file name -> content), read as the
    run reads them: what an exported model saves beside its weights."""
    assert config.model.pretrained_path is not None
    tokenizer_json, config_json = _files(workspace, config.model.pretrained_path)
    return {"tokenizer.json": tokenizer_json, "tokenizer_config.json": config_json}


def _digest(tokenizer_json: bytes, config_json: bytes) -> str:
    return hashlib.blake2b(tokenizer_json + b"\0" + config_json, digest_size=16).hexdigest()


def _files(workspace: Workspace, directory: str) -> tuple[bytes, bytes]:
    return _read(workspace, directory, "tokenizer.json"), _read(workspace, directory, "tokenizer_config.json")


def _read(workspace: Workspace, directory: str, file_name: str) -> bytes:
    try:
        path = f"{directory.rstrip('/')}/{file_name}"
        return workspace.read_bytes(FIELD, path, MAX_BYTES[file_name], kind=f"a {file_name}")
    except FileRefused as err:
        raise DataError(
            FIELD,
            directory,
            f"{err.message}; a pretrained tokenizer needs {file_name} in {short(directory)} (save the "
            "model's fast tokenizer there with tokenizer.save_pretrained)",
        ) from None


def _parse(
    directory: str, tokenizer_json: bytes, config_json: bytes
) -> tuple[Tokenizer, dict[str, int | None]]:
    try:
        tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        settings = json.loads(config_json)
    except Exception as err:  # tokenizers raises a plain Exception for a malformed tokenizer.json
        reason = short(str(err).splitlines()[0] if str(err) else type(err).__name__, 120)
        raise DataError(
            FIELD,
            directory,
            f"cannot read the tokenizer in {short(directory)} ({reason}); save it again with save_pretrained",
        ) from None
    tokenizer.no_truncation()  # a saved tokenizer may cut or pad; windows and rows are cut here instead
    tokenizer.no_padding()
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    largest = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=0)
    if largest >= size:  # ids past the vocabulary would index past the model's embedding
        raise DataError(
            FIELD,
            directory,
            f"tokenizer.json in {short(directory)} gives id {largest} to a token but holds {size} tokens; "
            "save the tokenizer again with save_pretrained (ids run from 0 to its size - 1)",
        )
    if not isinstance(settings, dict):
        raise DataError(FIELD, directory, f"tokenizer_config.json in {short(directory)} is not a JSON object")
    ids: dict[str, int | None] = {}
    for role, names in ROLES.items():
        ids[role] = None
        for name in names:
            token = settings.get(name)
            content = token.get("content") if isinstance(token, dict) else token
            if isinstance(content, str):
                token_id = tokenizer.token_to_id(content)
                if token_id is None:
                    raise DataError(
                        FIELD,
                        directory,
                        f"tokenizer_config.json in {short(directory)} names {name} {short(content)}, which "
                        "tokenizer.json does not hold; save the tokenizer again with save_pretrained",
                    )
                ids[role] = token_id
                break
    return tokenizer, ids
