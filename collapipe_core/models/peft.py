"""LoRA adapters (``training.peft``) with the ``peft`` library: targets per family, checks, injection.

The adapters are injected into the built model in place (``peft.inject_adapter_in_model``) *before*
the model is cut into its three parts, so the parts hold the adapted submodules: a targeted linear
layer becomes a ``peft`` LoRA layer whose frozen weight is ``….base_layer.weight`` and whose adapters
are ``….lora_A.default.weight`` and ``….lora_B.default.weight``; a module of ``modules_to_save`` keeps
its frozen original as ``….original_module.*`` and trains ``….modules_to_save.default.*``. Every other
parameter is frozen (``requires_grad`` False), whether the weights are random or from
``model.pretrained_path``. Stage weights, checkpoints and FedAvg use these names.

Targets (``target_modules``) are the names of the family's linear layers (a layer matches by its last
name). Defaults: the attention projections (:data:`DEFAULT_TARGETS`). GPT-2's layers are ``Conv1D``
(weights stored input × output): its adapters use ``fan_in_fan_out``. Modules trained in full beside the
adapters (``modules_to_save``) are a classifier's head; a language model's LM head is tied to the
token embedding (bart, gpt2) or as large as it, and is not offered.

``peft`` imports transformers: it is imported only when adapters are built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..config import ExperimentConfig, ModelConfig, PeftConfig

if TYPE_CHECKING:
    from ..validation import ConfigProblem

DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "builtin-seq2seq": ("qkv", "out", "self_qkv", "cross_q", "cross_kv"),
    "builtin-classifier": ("qkv", "out"),
    "bert": ("query", "key", "value"),
    "bart": ("q_proj", "k_proj", "v_proj"),
    "gpt2": ("c_attn",),
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj"),
}
"""The adapted layers when ``target_modules`` is left out: the attention projections."""

TARGETS: dict[str, tuple[str, ...]] = {
    "builtin-seq2seq": (
        *("qkv", "out", "ff1", "ff2"),  # encoder blocks
        *("self_qkv", "self_out", "cross_q", "cross_kv", "cross_out"),  # decoder layers (edge server)
    ),
    "builtin-classifier": ("qkv", "out", "ff1", "ff2", "pooler", "classifier"),
    "bert": ("query", "key", "value", "dense"),
    "bart": ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}
"""Every name ``target_modules`` may hold: the family's linear layers (bert's ``dense`` is the
attention output, the feed-forward layers and the pooler)."""

SAVABLE: dict[str, tuple[str, ...]] = {
    "builtin-seq2seq": (),
    "builtin-classifier": ("pooler", "classifier"),
    "bert": ("pooler", "classifier"),
    "bart": (),
    "gpt2": (),
    "llama": (),
}
"""Every name ``modules_to_save`` may hold: a classifier's head."""


def family_of(model_cfg: ModelConfig) -> str:
    """The key of :data:`TARGETS`: the architecture, or ``builtin-<kind>``."""
    if model_cfg.source == "transformers":
        return str(model_cfg.architecture)
    return f"builtin-{model_cfg.kind}"


def target_modules(peft_cfg: PeftConfig, model_cfg: ModelConfig) -> tuple[str, ...]:
    """The layers that get adapters: the config's, or the family's default."""
    if peft_cfg.target_modules is not None:
        return tuple(peft_cfg.target_modules)
    return DEFAULT_TARGETS[family_of(model_cfg)]


def lora_config(peft_cfg: PeftConfig, model_cfg: ModelConfig) -> Any:
    """The ``peft.LoraConfig`` of ``training.peft`` for this model (imports peft)."""
    from peft import LoraConfig

    return LoraConfig(
        r=peft_cfg.r,
        lora_alpha=peft_cfg.alpha,  # type: ignore[arg-type]  # typed int; a float scales alike
        lora_dropout=peft_cfg.dropout,
        target_modules=list(target_modules(peft_cfg, model_cfg)),
        modules_to_save=None if peft_cfg.modules_to_save is None else list(peft_cfg.modules_to_save),
        fan_in_fan_out=family_of(model_cfg) == "gpt2",  # GPT-2's Conv1D stores weights input × output
        bias="none",
    )


def inject_adapters(root: nn.Module, peft_cfg: PeftConfig, model_cfg: ModelConfig, seed: int | None) -> None:
    """Add the LoRA adapters of ``peft_cfg`` to ``root`` in place and freeze everything else.

    ``root`` is the module tree the layers live in (the transformers model, or the builtin model).
    The adapters' initial weights (A random, B zero: the adapted model starts as the base) are drawn
    under a forked CPU RNG seeded with ``seed`` (None: on the meta device, nothing is drawn).
    """
    from peft import inject_adapter_in_model

    config = lora_config(peft_cfg, model_cfg)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        inject_adapter_in_model(config, root)


def peft_problems(config: ExperimentConfig) -> list[ConfigProblem]:
    """What in ``training.peft`` this model cannot train: unknown targets or modules to save (the
    message lists the valid names), a target also saved whole, a rank above the hidden size."""
    from ..validation import ConfigProblem

    peft_cfg, m = config.training.peft, config.model
    if peft_cfg is None:
        return []
    family = family_of(m)
    shown = m.architecture if m.source == "transformers" else f"the builtin {m.kind}"
    problems = []
    valid = TARGETS[family]
    unknown = [name for name in peft_cfg.target_modules or () if name not in valid]
    if unknown:
        problems.append(
            ConfigProblem(
                "training.peft.target_modules",
                unknown,
                f"{shown} has no linear layer named {', '.join(unknown)}; its layers that take adapters "
                f"are {', '.join(valid)} (default: {', '.join(DEFAULT_TARGETS[family])})",
            )
        )
    savable = SAVABLE[family]
    not_savable = [name for name in peft_cfg.modules_to_save or () if name not in savable]
    if not_savable:
        fix = (
            f"choose among {', '.join(savable)}"
            if savable
            else "leave it out (modules_to_save trains a classifier's head in full; this model has none)"
        )
        problems.append(
            ConfigProblem(
                "training.peft.modules_to_save",
                not_savable,
                f"{shown} cannot train {', '.join(not_savable)} in full beside its adapters; {fix}",
            )
        )
    both = sorted(set(target_modules(peft_cfg, m)) & set(peft_cfg.modules_to_save or ()))
    if both:
        problems.append(
            ConfigProblem(
                "training.peft.modules_to_save",
                both,
                f"{', '.join(both)} is also a LoRA target; a module either gets adapters or trains in "
                "full: remove it from target_modules or from modules_to_save",
            )
        )
    if peft_cfg.r > m.d_model:
        problems.append(
            ConfigProblem(
                "training.peft.r",
                peft_cfg.r,
                f"the adapters' rank exceeds the hidden size (model.d_model = {m.d_model}): a rank above "
                f"it adds parameters but no expressiveness; choose r ≤ {m.d_model} (8 to 64 is usual)",
            )
        )
    return problems
