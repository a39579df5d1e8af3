"""The trained model out of a run: a directory that transformers, peft or CollaPipe loads back.

:func:`export_model` turns a run's executor state (the global weights FedAvg left after the last
round done, as the checkpoint holds them) into a model directory. What it holds (``weights`` in
``collapipe.json``):

- ``full`` (every weight trained): for a Hugging Face family (``model.source: transformers``) the
  transformers model's own ``save_pretrained`` directory — ``config.json`` and ``model.safetensors``
  (and ``generation_config.json`` for the families that generate) — loaded back with the family's
  ``from_pretrained(directory, local_files_only=True)`` (``BertForSequenceClassification``,
  ``BartForConditionalGeneration``, ``GPT2LMHeadModel``, ``LlamaForCausalLM``, or the ``AutoModelFor...``
  classes); a classifier's ``config.json`` names its classes (``id2label``). For a builtin model
  ``model.safetensors`` (the split model's state dict, names as in :mod:`collapipe_core.models`), which
  :func:`load_model` loads into the model CollaPipe's builder builds from ``collapipe.json``;
- ``adapter`` (``training.peft``): the peft adapter directory — ``adapter_config.json`` and
  ``adapter_model.safetensors``, written by ``PeftModel.save_pretrained`` — loaded onto its base with
  ``PeftModel.from_pretrained(base, directory)``. The base is the model the run adapted: the checkpoint
  of ``model.pretrained_path`` (``base_model_name_or_path`` names it as the config wrote it), or, when
  the run started from random weights, ``base/`` inside the export (a transformers family's
  ``save_pretrained`` directory of the run's frozen weights) or, for a builtin model, the model
  CollaPipe's builder builds from ``collapipe.json`` and the run's seed;
- ``merged`` (``training.peft`` exported with ``merge_adapter``): the adapter merged into its base
  (``merge_and_unload``): a ``full`` directory, loaded the same way.

Every directory also holds

- ``collapipe.json``: what the model was built with — the run's experiment config, the data's
  vocabulary size, number of outputs (target vocabulary or classes) and special ids, the class names
  of a classifier and, for character datasets (no subword tokenizer), the vocabularies (id -> token);
- the tokenizer the run encoded its texts with, when it had one (``data.tokenizer``): a ``bpe`` or
  ``wordpiece`` tokenizer the run trained is saved as a transformers fast tokenizer
  (``tokenizer.json``, ``tokenizer_config.json``: ``AutoTokenizer.from_pretrained(directory)``) with
  its special tokens (``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``) at the ids the model was trained with;
  a ``pretrained`` one is copied as the run read it from ``model.pretrained_path``.

Weights are saved in fp32. A ``bf16`` run stored its frozen weights in bf16 and computed under bf16
autocast: its export holds those weights (exact in fp32) and evaluates close to, not exactly at, the
run's eval loss. The analytic executor trains no weights: its runs have nothing to export
(:class:`NothingToExport`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import UNK_ID, DatasetBundle, load_dataset
from collapipe_core.models import EncoderStackModel, build_model
from collapipe_core.workspace import Workspace

FORMAT = 1
METADATA = "collapipe.json"
WEIGHTS = "model.safetensors"
BASE = "base"  # the random base of an adapter (transformers families)
ADAPTER_KEYS = ("lora_A.", "lora_B.", ".modules_to_save.")  # names of what trains beside a frozen base
Weights = Literal["full", "adapter", "merged"]


class NothingToExport(ValueError):
    """The run has no trained weights (the analytic executor trains none)."""


def check_exportable(config: ExperimentConfig, merge_adapter: bool = False) -> None:
    """NothingToExport unless ``config`` trains weights; ValueError for ``merge_adapter`` without
    adapters."""
    if config.executor == "analytic":
        raise NothingToExport(
            "the analytic executor trains no weights, so this run has no model to export; run the config "
            "with executor simulated or distributed to train one"
        )
    if merge_adapter and config.training.peft is None:
        raise ValueError(
            "merging applies to runs that trained LoRA adapters (training.peft); this run trained every "
            "weight, and its export is the whole model already"
        )


def weights_of(config: ExperimentConfig, merge_adapter: bool = False) -> Weights:
    if config.training.peft is None:
        return "full"
    return "merged" if merge_adapter else "adapter"


def weight_bytes(
    config: ExperimentConfig, bundle: DatasetBundle, pretrained: Path | None, merge_adapter: bool = False
) -> int:
    """Bytes of the weights (fp32) an export writes, counted on the model's skeleton (meta device:
    nothing allocated), a tied weight once: the whole model, an adapter (and its random base when the
    export ships one), or the base an adapter is merged into. ``pretrained``: model.pretrained_path
    resolved (its config.json sizes the model)."""
    from collapipe_core.models import build_skeleton

    weights = weights_of(config, merge_adapter)
    skeleton = build_skeleton(
        config.model,
        bundle.src_vocab_size,
        bundle.tgt_vocab_size,
        pad_id=bundle.pad_id,
        bos_id=bundle.bos_id,
        eos_id=bundle.eos_id,
        pretrained_dir=pretrained,
        peft=config.training.peft,
    )
    root = _root(skeleton)
    tensors: dict[int, tuple[str, torch.Tensor]] = {id(p): (name, p) for name, p in root.named_parameters()}
    for module in root.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and name not in module._non_persistent_buffers_set:
                tensors.setdefault(id(buffer), (name, buffer))
    total = 0
    for name, tensor in tensors.values():
        adapter = any(key in name for key in ADAPTER_KEYS)
        if weights == "adapter" and not adapter and not _ships_base(config):
            continue
        if weights == "merged" and adapter:
            continue
        total += tensor.numel() * 4
    return total


class TooLargeToExport(ValueError):
    """The export's weights are larger than the caller allows."""

    def __init__(self, size_bytes: int, max_bytes: int) -> None:
        super().__init__(f"the model's weights are {size_bytes:,} bytes, more than {max_bytes:,}")
        self.size_bytes = size_bytes
        self.max_bytes = max_bytes


@dataclass(frozen=True)
class Metadata:
    """``collapipe.json``: the run's config and the data facts its model was built with."""

    config: ExperimentConfig
    weights: Weights
    vocab_size: int  # rows of the source embedding the data asked for (model.vocab_size may override)
    num_outputs: int  # target vocabulary, or classes
    pad_id: int | None
    bos_id: int
    eos_id: int

    def build(self, seed: int = 0) -> EncoderStackModel:
        """The model these facts describe, without adapters, with the weights of a seeded initialisation
        (the run's own seed: the random base its adapters were trained on)."""
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
    *,
    merge_adapter: bool = False,
    max_bytes: int | None = None,
) -> Path:
    """Write the model of ``executor_state`` (a training executor's ``state_dict()``, or a
    checkpoint's ``"executor"``) into ``directory`` (created; files of an earlier export replaced):
    the whole model, or a LoRA run's adapter (``merge_adapter``: merged into its base).

    ``workspace`` reads the config's data and pretrained files (default: the local one).
    ``max_bytes``: TooLargeToExport, before any weight is built, when :func:`weight_bytes` exceeds it."""
    from collapipe_core.pipeline.simulated import build_run_model
    from collapipe_core.state import pretrained_dir

    check_exportable(config, merge_adapter)
    workspace = workspace or Workspace.local()
    bundle = load_dataset(config, workspace)
    pretrained = pretrained_dir(config, workspace)
    if max_bytes is not None:
        size = weight_bytes(config, bundle, pretrained, merge_adapter)
        if size > max_bytes:
            raise TooLargeToExport(size, max_bytes)
    model = build_run_model(config, bundle, pretrained)
    model.load_state_dict(executor_state["global_state"])
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with _quiet_transformers(config):
        if config.training.peft is None:
            _save_whole(_root(model), bundle, out)
        else:
            _save_adapted(config, bundle, _root(model), pretrained, out, merge_adapter)
    _save_tokenizer(config, bundle, workspace, out)
    metadata = _metadata_json(config, bundle, weights_of(config, merge_adapter))
    (out / METADATA).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return out


def read_metadata(directory: str | os.PathLike[str]) -> Metadata:
    """The ``collapipe.json`` of an exported model directory. The config is read as it was checked when
    the run was made, not checked again: the files it names (a server's data) need not be here."""
    data = json.loads((Path(directory) / METADATA).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{directory}: {METADATA} format {data.get('format')!r} is not {FORMAT}")
    return Metadata(
        config=ExperimentConfig.model_validate(data["config"]),
        weights=data["weights"],
        vocab_size=int(data["vocab_size"]),
        num_outputs=int(data["num_outputs"]),
        pad_id=data["pad_id"],
        bos_id=int(data["bos_id"]),
        eos_id=int(data["eos_id"]),
    )


def load_model(
    directory: str | os.PathLike[str], base: str | os.PathLike[str] | None = None
) -> EncoderStackModel:
    """An exported model as CollaPipe's split model (embedding | blocks | head), in eval mode, fp32.

    A transformers family is loaded with its ``from_pretrained`` (local files only) and split as a run
    splits it; a builtin model is built by CollaPipe's builder and its weights loaded. An adapter is
    loaded with ``PeftModel.from_pretrained`` onto its base: ``base`` (the directory of
    ``model.pretrained_path`` the run fine-tuned: needed then), else the export's ``base/``, else (a
    builtin model) the builder's initialisation with the run's seed."""
    path = Path(directory)
    metadata = read_metadata(path)
    config = metadata.config
    model: EncoderStackModel
    with _quiet_transformers(config):
        if metadata.weights != "adapter":
            model = _load_whole(metadata, path)
        else:
            from peft import PeftModel

            base_model = _load_base(metadata, path, base)
            with _peft_quietly():
                adapted = PeftModel.from_pretrained(_root(base_model), str(path), is_trainable=False)
            # a transformers family is split again: a part may hold a module peft replaced (a
            # classifier of modules_to_save); a builtin model's modules are replaced in place
            model = _split_again(config, adapted.base_model.model) if _is_hf(config) else base_model
    model.eval()
    return model


def _is_hf(config: ExperimentConfig) -> bool:
    return config.model.source == "transformers"


def _root(model: EncoderStackModel) -> nn.Module:
    """The module tree that holds the weights under their saved names: the transformers model of a
    Hugging Face family (the split model's parts wrap its submodules), the builtin model itself."""
    from collapipe_core.models.hf import HfSplitModel

    return model.hf_model if isinstance(model, HfSplitModel) else model


def _ships_base(config: ExperimentConfig) -> bool:
    """Whether an adapter export holds its base: a transformers family trained from random weights
    (a pretrained base is the user's checkpoint; a builtin base is rebuilt from the seed)."""
    return _is_hf(config) and config.model.pretrained_path is None


def _save_whole(root: nn.Module, bundle: DatasetBundle, out: Path) -> None:
    if hasattr(root, "save_pretrained"):  # a transformers model
        hf_model: Any = root
        if bundle.kind == "classifier":
            hf_model.config.id2label = dict(enumerate(bundle.tgt_vocab))
            hf_model.config.label2id = {name: i for i, name in enumerate(bundle.tgt_vocab)}
        hf_model.save_pretrained(str(out))
    else:
        from safetensors.torch import save_model

        save_model(root, str(out / WEIGHTS))


def _save_adapted(
    config: ExperimentConfig,
    bundle: DatasetBundle,
    trained: nn.Module,
    pretrained: Path | None,
    out: Path,
    merge: bool,
) -> None:
    """The run's adapters on a fresh base (``peft.get_peft_model``) holding the run's weights, saved
    as peft saves adapters, or merged into the base."""
    from peft import get_peft_model

    from collapipe_core.models.peft import lora_config

    assert config.training.peft is not None
    fresh = build_model(
        config.model,
        bundle.src_vocab_size,
        bundle.tgt_vocab_size,
        config.seed,
        pad_id=bundle.pad_id,
        bos_id=bundle.bos_id,
        eos_id=bundle.eos_id,
        pretrained_dir=pretrained,
    )
    with _peft_quietly():
        adapted = get_peft_model(_root(fresh), lora_config(config.training.peft, config.model))
    adapted.base_model.model.load_state_dict(trained.state_dict())  # the same names: the same injection
    if merge:
        _save_whole(adapted.merge_and_unload(), bundle, out)
        return
    adapter_config = adapted.peft_config["default"]
    adapter_config.base_model_name_or_path = config.model.pretrained_path  # as the config wrote it
    adapted.save_pretrained(str(out))
    (out / "README.md").unlink(missing_ok=True)  # peft's model card template: placeholders only
    if _ships_base(config):
        _save_whole(adapted.unload(), bundle, out / BASE)  # the frozen weights the run adapted


def _load_whole(metadata: Metadata, path: Path) -> EncoderStackModel:
    config = metadata.config
    if _is_hf(config):
        from collapipe_core.models.hf import ATTN_IMPLEMENTATION, family

        fam = family(config.model.architecture)
        hf_model = fam.model_class.from_pretrained(
            str(path),
            local_files_only=True,
            use_safetensors=True,
            attn_implementation=ATTN_IMPLEMENTATION,
            dtype=torch.float32,
        )
        return _split_again(config, hf_model)
    from safetensors.torch import load_model as load_weights

    model = metadata.build()
    load_weights(model, str(path / WEIGHTS))
    return model


def _load_base(metadata: Metadata, path: Path, base: str | os.PathLike[str] | None) -> EncoderStackModel:
    """The base an adapter export is loaded onto (see :func:`load_model`)."""
    config = metadata.config
    if base is not None or (path / BASE).is_dir():
        whole = dataclasses.replace(metadata, weights="full")
        return _load_whole(whole, Path(base) if base is not None else path / BASE)
    if config.model.pretrained_path is not None:
        raise ValueError(
            f"{path} holds LoRA adapters trained on model.pretrained_path {config.model.pretrained_path!r}: "
            "pass that checkpoint's directory as base"
        )
    return metadata.build(seed=config.seed)


def _split_again(config: ExperimentConfig, hf_model: Any) -> EncoderStackModel:
    from collapipe_core.models.hf import family

    split: EncoderStackModel = family(config.model.architecture).split(hf_model)
    return split


@contextmanager
def _peft_quietly() -> Iterator[None]:
    """peft 0.21 asks transformers 5.23 for the deprecated ``is_gradient_checkpointing`` (a FutureWarning
    about peft's code, nothing a user can change)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        yield


@contextmanager
def _quiet_transformers(config: ExperimentConfig) -> Iterator[None]:
    """Without transformers' progress bars (on a server's log, one line per file written or read)."""
    if not _is_hf(config):
        yield
        return
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()  # type: ignore[no-untyped-call]


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


def _metadata_json(config: ExperimentConfig, bundle: DatasetBundle, weights: Weights) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": FORMAT,
        "weights": weights,
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
