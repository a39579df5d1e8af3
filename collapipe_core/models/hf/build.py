"""Build a Hugging Face family as a CollaPipe split model: random weights, a local directory, or on meta.

- :func:`build_hf_model` with random weights: the family's config class from CollaPipe's fields and
  ``hf_config``, then the transformers model class with its own initialisation, run under a forked
  CPU RNG seeded with ``seed`` (same seed → bitwise-identical weights; the caller's global RNG state is
  restored afterwards);
- :func:`build_hf_model` with ``pretrained_dir`` (default ``model.pretrained_path``): the directory is
  checked first (:mod:`.pretrained`), then ``from_pretrained(dir, local_files_only=True,
  use_safetensors=True)`` — never a download, never remote code; weights the directory lacks (e.g. a
  new classifier) are initialised under the same seeded RNG;
- :func:`build_hf_skeleton`: the same structure on the meta device, nothing allocated or initialised
  (for FLOP and activation counting).

Vocabulary: ``model.vocab_size`` if set, else the data's vocabulary (for bart, gpt2 and llama at least
the number of outputs, the target vocabulary); a pretrained model keeps config.json's. The data's ids
must fit: a vocabulary larger than the embedding is refused.

Weights are float32 and attention is "sdpa" (:data:`.common.ATTN_IMPLEMENTATION`). With ``peft``
(training.peft) LoRA adapters are injected into the transformers model before it is split
(:mod:`..peft`); with ``precision`` bf16 the frozen weights are then stored in bf16 (:mod:`..precision`).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from ...config import ModelConfig, PeftConfig
from ..peft import inject_adapters
from ..precision import store_frozen
from .common import ATTN_IMPLEMENTATION, BuildArgs, Family, HfSplitModel
from .pretrained import FIELD, SIZE_KEYS, architecture_of, checked_pretrained_dir, read_config_json, sizes_in

FAMILIES = tuple(SIZE_KEYS)


def family(architecture: str | None) -> Family:
    """The :class:`Family` of ``architecture`` (imports transformers, once)."""
    if architecture not in FAMILIES:
        raise ValueError(f"model.architecture {architecture!r} is not one of {', '.join(FAMILIES)}")
    module = importlib.import_module(f"{__package__}.{architecture}")
    found: Family = module.FAMILY
    return found


def build_hf_model(
    model_cfg: ModelConfig,
    vocab_size: int,
    num_outputs: int,
    seed: int,
    *,
    pad_id: int | None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pretrained_dir: str | os.PathLike[str] | None = None,
    peft: PeftConfig | None = None,
    precision: str = "fp32",
) -> HfSplitModel:
    """The ``model.architecture`` split model, random (seeded) or loaded from a local directory.

    ``vocab_size`` is the data's vocabulary, ``num_outputs`` the classes (bert) or target vocabulary.
    ``peft``: LoRA adapters injected into the transformers model before it is split (the parts hold the
    adapted layers); ``precision`` bf16 stores the frozen parameters in bf16.
    """
    fam = family(model_cfg.architecture)
    directory = pretrained_dir if pretrained_dir is not None else model_cfg.pretrained_path
    config = _config(fam, model_cfg, vocab_size, num_outputs, pad_id, bos_id, eos_id, directory)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if directory is None:
                model = fam.model_class._from_config(
                    config, attn_implementation=ATTN_IMPLEMENTATION, dtype=torch.float32
                )
            else:
                model = _load(fam, config, directory, _shown(model_cfg, directory))
        if peft is not None:
            inject_adapters(model, peft, model_cfg, seed)
        split = fam.split(model)
    except Exception as err:
        raise _not_built(err, fam, model_cfg, directory) from None
    store_frozen(split, precision)
    split.train()  # as a built model is; from_pretrained leaves eval mode
    return split


def build_hf_skeleton(
    model_cfg: ModelConfig,
    vocab_size: int,
    num_outputs: int,
    *,
    pad_id: int | None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pretrained_dir: str | os.PathLike[str] | None = None,
    peft: PeftConfig | None = None,
    precision: str = "fp32",
) -> HfSplitModel:
    """The split model of :func:`build_hf_model` on the meta device: shapes and names, no storage."""
    fam = family(model_cfg.architecture)
    directory = pretrained_dir if pretrained_dir is not None else model_cfg.pretrained_path
    config = _config(fam, model_cfg, vocab_size, num_outputs, pad_id, bos_id, eos_id, directory)
    try:
        with torch.device("meta"):  # transformers skips initialisation on meta
            model = fam.model_class._from_config(
                config, attn_implementation=ATTN_IMPLEMENTATION, dtype=torch.float32
            )
            if peft is not None:
                inject_adapters(model, peft, model_cfg, seed=None)
        split = fam.split(model)
    except Exception as err:
        raise _not_built(err, fam, model_cfg, directory) from None
    store_frozen(split, precision)
    return split


def _not_built(
    err: Exception, fam: Family, model_cfg: ModelConfig, directory: str | os.PathLike[str] | None
) -> ValueError:
    """Whatever transformers raised while building the model (a ZeroDivisionError for ``head_dim: 0``, a
    KeyError for an unknown activation ...) as a ValueError naming the field that holds the cause."""
    if isinstance(err, ValueError) and str(err).startswith("model"):
        return err  # already names its field
    if directory is not None:
        name = _shown(model_cfg, directory)
        reason = f"{type(err).__name__}: {_reason(err, directory, name)}"
        return ValueError(
            f"{FIELD} {name!r}: transformers cannot build a model from its config.json ({reason}); fix "
            "config.json or save the model again with save_pretrained"
        )
    reason = f"{type(err).__name__}: {_reason(err)}"
    if model_cfg.hf_config:
        return ValueError(
            f"model.hf_config: transformers cannot build a {fam.name} model with these fields ({reason}); "
            "change or remove them"
        )
    return ValueError(f"model ({fam.name}): transformers cannot build this model ({reason})")


def _config(
    fam: Family,
    model_cfg: ModelConfig,
    vocab_size: int,
    num_outputs: int,
    pad_id: int | None,
    bos_id: int | None,
    eos_id: int | None,
    directory: str | os.PathLike[str] | None,
) -> Any:
    """The family's config: from CollaPipe's fields, or config.json plus the run fields and hf_config."""
    from huggingface_hub.errors import StrictDataclassError  # what config classes raise on bad values

    if model_cfg.source != "transformers":
        raise ValueError(
            f"model.source is {model_cfg.source!r}; Hugging Face models need source: transformers"
        )
    if directory is None:
        if model_cfg.vocab_size is not None:
            vocab, where = model_cfg.vocab_size, "model.vocab_size"
        else:
            vocab, where = vocab_size if fam.kind == "classifier" else max(vocab_size, num_outputs), "data"
        args = BuildArgs(vocab, num_outputs, pad_id, bos_id, eos_id)
        kwargs = fam.config_kwargs(model_cfg, args, pretrained=False)
        try:
            config = fam.config_class(**kwargs)
        except (TypeError, ValueError, StrictDataclassError) as err:
            raise ValueError(
                f"model ({fam.name}): {fam.config_class.__name__} refused the configuration: {err}"
            ) from None
    else:
        name = _shown(model_cfg, directory)
        config_json = read_config_json(directory, name)
        found = architecture_of(config_json, directory, name)
        if found != fam.name:
            raise ValueError(f"{FIELD} {name!r} holds a {found} model but model.architecture is {fam.name}")
        sizes = sizes_in(config_json, directory, name)  # refused here, before transformers sees a size
        args = BuildArgs(sizes.vocab_size, num_outputs, pad_id, bos_id, eos_id)
        kwargs = fam.config_kwargs(model_cfg, args, pretrained=True)
        try:  # from the checked dict: transformers never reads the file itself
            config = fam.config_class.from_dict(config_json, **kwargs)
        except Exception as err:  # the config class's own checks, whatever they raise
            raise ValueError(f"{FIELD} {name!r}: its config.json was refused: {_reason(err)}") from None
        vocab, where = int(config.vocab_size), f"{FIELD}'s config.json"
    limit = vocab_size if fam.kind == "classifier" else max(vocab_size, num_outputs)
    if limit > vocab:
        raise ValueError(
            f"the data's vocabulary ({limit} ids) does not fit the model's {vocab}-row embedding ({where}); "
            "raise model.vocab_size or use the model's own tokenizer"
        )
    return config


def _load(fam: Family, config: Any, directory: str | os.PathLike[str], name: str) -> Any:
    path = os.fspath(checked_pretrained_dir(directory, name))
    try:
        return fam.model_class.from_pretrained(
            path,
            config=config,
            local_files_only=True,
            use_safetensors=True,
            attn_implementation=ATTN_IMPLEMENTATION,
            dtype=torch.float32,
        )
    except (OSError, ValueError, RuntimeError) as err:
        raise ValueError(f"{FIELD} {name!r} could not be loaded: {_reason(err, path, name)}") from None


def _shown(model_cfg: ModelConfig, directory: str | os.PathLike[str]) -> str:
    """How messages name the checkpoint: ``model.pretrained_path`` as the config wrote it (the
    directory may be where it resolved on a server, which nobody reading a run's error should see)."""
    return model_cfg.pretrained_path or os.fspath(directory)


def _reason(err: BaseException, path: str | os.PathLike[str] | None = None, name: str = "") -> str:
    """The first line of an exception from transformers or the file, cut short, with the directory
    ``path`` (as given and as absolute) shown as ``name``."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if path is not None:
        text = text.replace(os.path.abspath(path), name).replace(os.fspath(path), name)
    return text if len(text) <= 300 else text[:299] + "…"
