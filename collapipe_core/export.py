"""The trained model out of a run: a directory that transformers or CollaPipe loads back.

:func:`export_model` turns a run's executor state (the global weights FedAvg left after the last
round done, as the checkpoint holds them) into a model directory:

- a Hugging Face family (``model.source: transformers``): the transformers model's own
  ``save_pretrained`` directory — ``config.json`` and ``model.safetensors`` (and
  ``generation_config.json`` for the families that generate) — loaded back with
  ``<family class>.from_pretrained(directory, local_files_only=True)``
  (``BertForSequenceClassification``, ``BartForConditionalGeneration``, ``GPT2LMHeadModel``,
  ``LlamaForCausalLM``, or the ``AutoModelFor...`` classes). A classifier's ``config.json`` names its
  classes (``id2label``);
- a builtin model: ``model.safetensors`` (the split model's state dict, names as in
  :mod:`collapipe_core.models`) and ``collapipe.json``; :func:`load_model` builds it back with
  CollaPipe's own builder.

Every directory also holds

- ``collapipe.json``: what the model was built with — the run's experiment config, the data's
  vocabulary size, number of outputs (target vocabulary or classes) and special ids, the class names
  of a classifier and, for character datasets (no subword tokenizer), the vocabularies (id -> token);
- the tokenizer the run encoded its texts with, when it had one (``data.tokenizer``): a ``bpe`` or
  ``wordpiece`` tokenizer the run trained is saved as a transformers fast tokenizer
  (``tokenizer.json``, ``tokenizer_config.json``: ``AutoTokenizer.from_pretrained(directory)``) with
  its special tokens (``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``) at the ids the model was trained with;
  a ``pretrained`` one is copied as the run read it from ``model.pretrained_path``.

The analytic executor trains no weights: its runs have nothing to export (:class:`NothingToExport`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from collapipe_core.config import ExperimentConfig, ModelConfig
from collapipe_core.data import UNK_ID, DatasetBundle, load_dataset
from collapipe_core.models import EncoderStackModel, build_model
from collapipe_core.workspace import Workspace

FORMAT = 1
METADATA = "collapipe.json"
WEIGHTS = "model.safetensors"


class NothingToExport(ValueError):
    """The run has no trained weights (the analytic executor trains none)."""


def check_exportable(config: ExperimentConfig) -> None:
    """NothingToExport unless ``config`` trains weights."""
    if config.executor == "analytic":
        raise NothingToExport(
            "the analytic executor trains no weights, so this run has no model to export; run the config "
            "with executor simulated or distributed to train one"
        )


def weight_bytes(executor_state: dict[str, Any]) -> int:
    """Bytes of the weights an export of ``executor_state`` writes (each stored tensor once; a tied
    weight appears under several names but is one tensor)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in executor_state["global_state"].values():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
    return total


@dataclass(frozen=True)
class Metadata:
    """``collapipe.json``: the run's config and the data facts its model was built with."""

    config: ExperimentConfig
    vocab_size: int  # rows of the source embedding the data asked for (model.vocab_size may override)
    num_outputs: int  # target vocabulary, or classes
    pad_id: int | None
    bos_id: int
    eos_id: int

    def build(self, seed: int = 0) -> EncoderStackModel:
        """The model these facts describe, with fresh weights (those of a seeded initialisation)."""
        return build_model(
            self.config.model,
            self.vocab_size,
            self.num_outputs,
            seed,
            pad_id=self.pad_id,
            bos_id=self.bos_id,
            eos_id=self.eos_id,
        )


def export_model(
    config: ExperimentConfig,
    executor_state: dict[str, Any],
    directory: str | os.PathLike[str],
    workspace: Workspace | None = None,
) -> Path:
    """Write the model of ``executor_state`` (a training executor's ``state_dict()``, or a
    checkpoint's ``"executor"``) into ``directory`` (created; files of an earlier export replaced).

    ``workspace`` reads the config's data and pretrained files (default: the local one)."""
    from collapipe_core.pipeline.simulated import build_run_model
    from collapipe_core.state import pretrained_dir

    check_exportable(config)
    workspace = workspace or Workspace.local()
    bundle = load_dataset(config, workspace)
    model = build_run_model(config, bundle, pretrained_dir(config, workspace))
    model.load_state_dict(executor_state["global_state"])
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if config.model.source == "transformers":
        with _quiet_transformers():
            _save_transformers(model, bundle, out)
    else:
        from safetensors.torch import save_model

        save_model(model, str(out / WEIGHTS))
    _save_tokenizer(config, bundle, workspace, out)
    (out / METADATA).write_text(json.dumps(_metadata_json(config, bundle), indent=2) + "\n", encoding="utf-8")
    return out


def read_metadata(directory: str | os.PathLike[str]) -> Metadata:
    """The ``collapipe.json`` of an exported model directory."""
    from collapipe_core.validation import parse_config

    data = json.loads((Path(directory) / METADATA).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{directory}: {METADATA} format {data.get('format')!r} is not {FORMAT}")
    return Metadata(
        config=parse_config(data["config"]),
        vocab_size=int(data["vocab_size"]),
        num_outputs=int(data["num_outputs"]),
        pad_id=data["pad_id"],
        bos_id=int(data["bos_id"]),
        eos_id=int(data["eos_id"]),
    )


def load_model(directory: str | os.PathLike[str]) -> EncoderStackModel:
    """An exported model as CollaPipe's split model (embedding | blocks | head), in eval mode: a builtin
    one built with CollaPipe's builder and its weights loaded; a transformers one loaded with its
    family's ``from_pretrained`` (local files only) and split as a run splits it."""
    metadata = read_metadata(directory)
    model: EncoderStackModel
    if metadata.config.model.source == "transformers":
        model = _load_transformers(metadata.config.model, Path(directory))
    else:
        from safetensors.torch import load_model as load_weights

        model = metadata.build()
        load_weights(model, str(Path(directory) / WEIGHTS))
    model.eval()
    return model


def _load_transformers(model_cfg: ModelConfig, directory: Path) -> EncoderStackModel:
    from collapipe_core.models.hf import ATTN_IMPLEMENTATION, family

    fam = family(model_cfg.architecture)
    with _quiet_transformers():
        hf_model = fam.model_class.from_pretrained(
            str(directory),
            local_files_only=True,
            use_safetensors=True,
            attn_implementation=ATTN_IMPLEMENTATION,
            dtype=torch.float32,
        )
    return fam.split(hf_model)


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Without transformers' progress bars (on a server's log, one line per file written or read)."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _save_transformers(model: EncoderStackModel, bundle: DatasetBundle, out: Path) -> None:
    from collapipe_core.models.hf import HfSplitModel

    assert isinstance(model, HfSplitModel)
    hf_model = model.hf_model
    if model.kind == "classifier":
        hf_model.config.id2label = dict(enumerate(bundle.tgt_vocab))
        hf_model.config.label2id = {name: i for i, name in enumerate(bundle.tgt_vocab)}
    hf_model.save_pretrained(str(out))


def _save_tokenizer(config: ExperimentConfig, bundle: DatasetBundle, workspace: Workspace, out: Path) -> None:
    """The run's tokenizer beside the weights (none for character datasets)."""
    if config.data.tokenizer.kind == "pretrained" and bundle.tokenizer is not None:
        from collapipe_core.data.pretrained_tokenizer import pretrained_tokenizer_files

        for name, content in pretrained_tokenizer_files(config, workspace).items():
            (out / name).write_bytes(content)
        return
    if bundle.tokenizer is None:
        return
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    trained = bundle.tokenizer
    vocab = trained.vocab
    specials = trained.specials
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer.from_str(trained.tokenizer.to_str()),  # a copy: the run's is cached
        bos_token=vocab[specials.bos],
        eos_token=vocab[specials.eos],
        pad_token=None if specials.pad is None else vocab[specials.pad],
        unk_token=vocab[UNK_ID],  # trained tokenizers keep CollaPipe's special ids
        model_max_length=config.model.seq_len,
    )
    fast.save_pretrained(str(out))


def _metadata_json(config: ExperimentConfig, bundle: DatasetBundle) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": FORMAT,
        "source": config.model.source,
        "architecture": config.model.architecture,
        "kind": config.model.kind,
        "vocab_size": bundle.src_vocab_size,
        "num_outputs": bundle.tgt_vocab_size,
        "pad_id": bundle.pad_id,
        "bos_id": bundle.bos_id,
        "eos_id": bundle.eos_id,
    }
    if config.model.kind == "classifier":
        data["classes"] = list(bundle.tgt_vocab)
    if bundle.tokenizer is None:  # character vocabularies: the id -> character tables
        data["src_vocab"] = list(bundle.src_vocab)
        if config.model.kind != "classifier":
            data["tgt_vocab"] = list(bundle.tgt_vocab)
    data["config"] = config.model_dump(mode="json", by_alias=True)
    return data
