"""Local pretrained directories: refused unless local, and the CollaPipe sizes their config.json implies.

``model.pretrained_path`` names a directory written by ``save_pretrained`` (config.json and safetensors
weights). CollaPipe never downloads: a Hub name ("gpt2"), a URL, a missing directory or one without a
config.json is refused with a ``ValueError`` naming ``model.pretrained_path``, the value and why
(:func:`checked_pretrained_dir`), before transformers sees the path.

:func:`pretrained_sizes` reads config.json as JSON only (no transformers import, no code from the
directory) and returns the size fields it implies, so validation can compare them with the config:
d_model, num_heads, num_kv_heads (llama), ffn_dim, num_blocks, num_decoder_layers (bart), vocab_size,
max_positions (≥ seq_len, and ≥ target_len for bart). A key missing from config.json takes its
config class's default (:data:`DEFAULTS`, checked against transformers by the tests); GPT-2's
``n_inner: null`` means 4·d and LLaMA's ``num_key_value_heads: null`` means num_heads.

config.json is a user's file like any other: it is read only as a regular file of at most
:data:`MAX_CONFIG_JSON_BYTES`, a nesting past the recursion limit is refused, and every size key it
gives must be an integer within the bounds the config's own fields have (``ModelConfig``: blocks,
hidden size, heads dividing it, feed-forward width, vocabulary; positions from 1 to
:data:`MAX_POSITIONS`), so no transformers code builds from an absurd or malformed size. Messages
name the directory as the config wrote it (``name``), never the path it resolved to.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collapipe_core.quote import short
from collapipe_core.workspace import FileTooBig, read_regular_file

FIELD = "model.pretrained_path"

SIZE_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "bert": {
        "d_model": ("hidden_size",),
        "num_heads": ("num_attention_heads",),
        "ffn_dim": ("intermediate_size",),
        "num_blocks": ("num_hidden_layers",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",),
    },
    "bart": {
        "d_model": ("d_model",),
        "num_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
        "num_blocks": ("encoder_layers",),
        "num_decoder_layers": ("decoder_layers",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",),
    },
    "gpt2": {
        "d_model": ("n_embd",),
        "num_heads": ("n_head",),
        "ffn_dim": ("n_inner",),
        "num_blocks": ("n_layer",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("n_positions",),
    },
    "llama": {
        "d_model": ("hidden_size",),
        "num_heads": ("num_attention_heads",),
        "num_kv_heads": ("num_key_value_heads",),
        "ffn_dim": ("intermediate_size",),
        "num_blocks": ("num_hidden_layers",),
        "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",),
    },
}
"""Per architecture: CollaPipe size field -> the config-class keys it sets (the first one is read back)."""

DEFAULTS: dict[str, dict[str, int | None]] = {
    "bert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    },
    "bart": {
        "d_model": 1024,
        "encoder_attention_heads": 16,
        "encoder_ffn_dim": 4096,
        "encoder_layers": 12,
        "decoder_layers": 12,
        "vocab_size": 50265,
        "max_position_embeddings": 1024,
    },
    "gpt2": {
        "n_embd": 768,
        "n_head": 12,
        "n_inner": None,
        "n_layer": 12,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    "llama": {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
    },
}
"""The config classes' defaults of the keys in :data:`SIZE_KEYS` (transformers 5.23)."""

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
MAX_CONFIG_JSON_BYTES = 2**20
"""Largest config.json read (a real one is a few KB; id2label of many classes stays far below)."""
MAX_POSITIONS = 2**24
"""Most positions a checkpoint may declare: a learned position table is an embedding, bounded like
``model.vocab_size``."""


@dataclass(frozen=True)
class PretrainedSizes:
    """What a pretrained directory's config.json says about the sizes CollaPipe configures."""

    architecture: str  # bert | bart | gpt2 | llama (config.json's model_type)
    d_model: int
    num_heads: int
    num_kv_heads: int | None  # llama only
    ffn_dim: int
    num_blocks: int  # the split layers: bert/bart encoder layers, gpt2/llama decoder layers
    num_decoder_layers: int | None  # bart only
    vocab_size: int
    max_positions: int  # learned positions (rope for llama): seq_len (and bart's target_len) must fit


def looks_like_hub_name(text: str) -> bool:
    """``gpt2``, ``meta-llama/Llama-2-7b-hf``: what a user who expects a download would write."""
    return bool(_HUB_NAME.match(text)) and not text.startswith(".")


def _where(path: str | os.PathLike[str], name: str | None) -> str:
    """How a message names the directory: the config's ``name`` (never the resolved path) when given."""
    return f"{FIELD} {os.fspath(path) if name is None else name!r}"


def checked_pretrained_dir(path: str | os.PathLike[str], name: str | None = None) -> Path:
    """``path`` as a local directory holding a config.json; a ValueError saying why it is not one.

    ``name``: how messages name it (the config's ``model.pretrained_path``); default ``path``."""
    text = os.fspath(path)
    why = ""
    if "://" in text or text.startswith(("hf:", "www.")):
        why = "is a URL; CollaPipe never downloads models"
    elif not os.path.exists(text):
        why = "does not exist"
        if looks_like_hub_name(text):
            why += (
                " (it looks like a Hugging Face Hub name: CollaPipe never downloads models; "
                "save the model with save_pretrained into a local directory and give that path)"
            )
    elif not os.path.isdir(text):
        why = "is a file, not a directory written by save_pretrained"
    elif not os.path.isfile(os.path.join(text, "config.json")):
        why = "has no config.json; give a directory written by save_pretrained"
        if os.path.isfile(os.path.join(text, "adapter_config.json")):
            why = (
                "is a peft adapter directory (adapter_config.json), not a model: CollaPipe does not load "
                "adapters; give the base model's save_pretrained directory as model.pretrained_path and "
                "set training.peft to train new adapters on it (to continue training adapters of a run, "
                "fork that run)"
            )
    if why:
        raise ValueError(f"{_where(path, name)} {why}")
    return Path(text)


def read_config_json(path: str | os.PathLike[str], name: str | None = None) -> dict[str, Any]:
    """The parsed config.json of a checked pretrained directory (JSON only, nothing executed), read
    only when it is a regular file of at most :data:`MAX_CONFIG_JSON_BYTES`."""
    directory, where = checked_pretrained_dir(path, name), _where(path, name)
    try:
        data = read_regular_file(directory / "config.json", MAX_CONFIG_JSON_BYTES, follow_symlinks=True)
        loaded = json.loads(data.decode("utf-8"))
    except FileTooBig as err:
        raise ValueError(
            f"{where}: config.json is {err.size / 2**20:.1f} MiB; a checkpoint's config.json may be at "
            f"most {MAX_CONFIG_JSON_BYTES / 2**20:.0f} MiB (save_pretrained writes a few KB)"
        ) from None
    except OSError as err:
        raise ValueError(f"{where}: config.json cannot be read ({err.strerror or err})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{where}: config.json is not readable JSON ({err})") from None
    except RecursionError:
        raise ValueError(
            f"{where}: config.json is nested deeper than CollaPipe reads (about "
            f"{sys.getrecursionlimit()} levels); save the model again with save_pretrained"
        ) from None
    except ValueError:  # an integer of more digits than Python converts
        raise ValueError(
            f"{where}: config.json holds a number of more than {sys.get_int_max_str_digits()} digits; "
            "save the model again with save_pretrained"
        ) from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{where}: config.json is not a JSON object")
    return loaded


def architecture_of(
    config_json: dict[str, Any], path: str | os.PathLike[str], name: str | None = None
) -> str:
    """config.json's ``model_type`` when it is one of the families CollaPipe splits."""
    model_type = config_json.get("model_type")
    if model_type not in SIZE_KEYS:
        raise ValueError(
            f"{_where(path, name)}: config.json's model_type is {short(model_type)}; CollaPipe splits "
            f"{', '.join(SIZE_KEYS)}"
        )
    return str(model_type)


def pretrained_sizes(path: str | os.PathLike[str], name: str | None = None) -> PretrainedSizes:
    """The architecture and size fields the config.json of directory ``path`` implies.

    Every size key config.json gives (both of BART's encoder and decoder keys) must be an integer
    within the bounds :class:`~collapipe_core.config.ModelConfig` puts on the field it maps to, heads
    dividing the hidden size, positions between 1 and :data:`MAX_POSITIONS`: a ValueError naming the
    key, its value and the bound otherwise, before any transformers code sees the file.
    """
    return sizes_in(read_config_json(path, name), path, name)


def sizes_in(
    config_json: dict[str, Any], path: str | os.PathLike[str], name: str | None = None
) -> PretrainedSizes:
    """:func:`pretrained_sizes` of an already read config.json (of directory ``path``)."""
    arch, where = architecture_of(config_json, path, name), _where(path, name)
    keys, defaults = SIZE_KEYS[arch], DEFAULTS[arch]

    def read(key: str) -> int | None:
        value = config_json.get(key, defaults.get(key))
        optional = key not in defaults or defaults[key] is None  # n_inner, num_key_value_heads, decoder_*
        if (value is None and not optional) or isinstance(value, bool) or not isinstance(value, int | None):
            raise ValueError(f"{where}: config.json's {key} is {short(value)}, not an integer")
        return value

    given = {field: [(key, read(key)) for key in names] for field, names in keys.items()}
    first = {field: pairs[0] for field, pairs in given.items()}
    for field, pairs in given.items():  # BART's decoder keys default to the encoder's values
        given[field] = [first[field]] + [pair for pair in pairs[1:] if pair[1] is not None]
    d_model, num_heads = first["d_model"][1], first["num_heads"][1]
    assert d_model is not None and num_heads is not None  # read() refuses a null where none is allowed
    implied = {"ffn_dim": 4 * d_model, "num_kv_heads": num_heads}  # GPT-2's n_inner, LLaMA's kv heads: null
    for index in range(max(len(pairs) for pairs in given.values())):  # BART: encoder, then decoder keys
        sizes = {}
        for field, pairs in given.items():
            key, value = pairs[min(index, len(pairs) - 1)]
            value = implied.get(field) if value is None else value
            if value is not None:
                sizes[field] = (key, value)
        _check_bounds(arch, sizes, where)
    key, positions = first["max_positions"]
    assert positions is not None
    for bound, fails in (
        ("at least 1", positions < 1),
        (f"at most {MAX_POSITIONS}", positions > MAX_POSITIONS),
    ):
        if fails:
            raise ValueError(
                f"{where}: config.json's {key} is {short(positions)}, outside what CollaPipe builds: "
                f"positions must be {bound}; use a checkpoint within these bounds"
            )

    def size(field: str) -> int:
        value = first[field][1]
        return implied[field] if value is None else value

    return PretrainedSizes(
        architecture=arch,
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=size("num_kv_heads") if arch == "llama" else None,
        ffn_dim=size("ffn_dim"),
        num_blocks=size("num_blocks"),
        num_decoder_layers=first["num_decoder_layers"][1] if arch == "bart" else None,
        vocab_size=size("vocab_size"),
        max_positions=positions,
    )


def _check_bounds(arch: str, sizes: dict[str, tuple[str, int]], where: str) -> None:
    """The sizes (field -> (config.json key, value)) as :class:`ModelConfig` would take them, or a
    ValueError naming the key: one implementation of the bounds, the config's."""
    from pydantic import ValidationError

    from collapipe_core.config import ModelConfig

    fields = {field: value for field, (_, value) in sizes.items() if field != "max_positions"}
    if arch != "llama":
        fields.pop("num_kv_heads", None)
    try:
        ModelConfig.model_validate({"source": "transformers", "architecture": arch, **fields})
    except ValidationError as err:
        error = err.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        limits = error.get("ctx") or {}
        if field in sizes and ("le" in limits or "ge" in limits):
            key, value = sizes[field]
            bound = f"at most {limits['le']}" if "le" in limits else f"at least {limits['ge']}"
            raise ValueError(
                f"{where}: config.json's {key} is {short(value)}, outside what CollaPipe builds: "
                f"model.{field} must be {bound}; use a checkpoint within these bounds"
            ) from None
        listed = ", ".join(f"{key} {short(value)}" for key, value in sizes.values())
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(
            f"{where}: config.json's sizes ({listed}) are not a model CollaPipe builds: {reason}"
        ) from None
