"""What every Hugging Face family shares: the split model type, the family description, config mapping.

A family module (:mod:`.bert`, :mod:`.bart`, :mod:`.gpt2`, :mod:`.llama`) describes itself with a
:class:`Family`: its transformers config and model classes, how CollaPipe's fields map onto the config
class (:meth:`Family.config_kwargs`), and how to cut a built transformers model into CollaPipe's three
parts (``split``). The parts wrap the transformers model's own submodules — the same ``Parameter``
objects, so training the parts trains the transformers model — and take and return plain tensors; masks
and positions are recomputed inside each part from ``src_mask`` (no caches, no ``ModelOutput``).

Attention masks are built here as 4-D boolean masks (sdpa's convention, True = may attend) with plain
tensor operations — :func:`bidirectional_mask` (every query sees the real keys) and :func:`causal_mask`
(query j sees the real keys ≤ j) — and handed to the layers as they are: the same masks the whole
transformers model builds from the 2-D padding mask, but without its data-dependent shortcuts (which
read mask values), so every part also runs on the meta device (FLOP counting).

``model.hf_config`` keys pass unchanged into the config class, except keys that are not fields of it,
keys starting with "_", and keys CollaPipe sets itself (sizes, dropout, special ids, and switches the
split relies on such as ``use_cache``): those are refused with a ``ValueError`` naming
``model.hf_config.<key>``.

Attention is pinned to :data:`ATTN_IMPLEMENTATION` ("sdpa") for every family.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ...config import ModelConfig
from ..blocks import EncoderStackModel
from .pretrained import SIZE_KEYS

ATTN_IMPLEMENTATION = "sdpa"  # the masks below follow its boolean convention (eager adds float masks)

STRUCTURAL: dict[str, str] = {
    "return_dict": "stages return plain tensors",
    "output_hidden_states": "stages return plain tensors",
    "output_attentions": "stages return plain tensors",
    "is_encoder_decoder": "the architecture decides it",
    "is_decoder": "the architecture decides it",
    "add_cross_attention": "the architecture decides it",
    "architectures": "model.architecture decides it",
    "transformers_version": "it is written by transformers",
    "dtype": "weights are float32",
    "id2label": "the dataset's classes decide it",
    "label2id": "the dataset's classes decide it",
    "problem_type": "the model kind decides it",
}
"""Config fields CollaPipe never takes from ``hf_config``, and why."""


@dataclass(frozen=True)
class BuildArgs:
    """What the data decides: vocabulary, outputs (classes or target vocabulary), special token ids."""

    vocab_size: int  # rows of the token embedding
    num_outputs: int  # classifier: classes; otherwise the target vocabulary (≤ vocab_size)
    pad_id: int | None  # None: the data has no padding token
    bos_id: int | None = None
    eos_id: int | None = None


Fields = dict[str, tuple[Any, str]]
"""config key -> (value, the CollaPipe field or fact it comes from)."""


@dataclass(frozen=True)
class Family:
    """One transformers model family as CollaPipe builds and splits it."""

    name: str  # model.architecture
    kind: str  # model.kind it trains
    config_class: type[Any]
    model_class: type[Any]
    run_fields: Callable[[ModelConfig, BuildArgs], Fields]  # dropout, labels, ...: random init and loads
    split: Callable[[Any], HfSplitModel]
    extra_keys: frozenset[str] = frozenset()  # legacy config kwargs accepted besides the fields

    def size_fields(self, model_cfg: ModelConfig, args: BuildArgs) -> Fields:
        """The config keys of :data:`.pretrained.SIZE_KEYS` set from CollaPipe's size fields."""
        m = model_cfg
        positions = max(m.seq_len, m.target_len) if self.kind == "seq2seq" else m.seq_len
        values: dict[str, tuple[Any, str]] = {
            "d_model": (m.d_model, "model.d_model"),
            "num_heads": (m.num_heads, "model.num_heads"),
            "num_kv_heads": (m.num_kv_heads or m.num_heads, "model.num_kv_heads"),
            "ffn_dim": (m.ffn_dim, "model.ffn_dim"),
            "num_blocks": (m.num_blocks, "model.num_blocks"),
            "num_decoder_layers": (m.num_decoder_layers, "model.num_decoder_layers"),
            "vocab_size": (args.vocab_size, "model.vocab_size (or the data's vocabulary)"),
            "max_positions": (positions, "model.seq_len (and model.target_len)"),
        }
        return {key: values[name] for name, keys in SIZE_KEYS[self.name].items() for key in keys}

    def config_fields(self) -> frozenset[str]:
        """The keys the config class takes: its fields, and the legacy keys it accepts."""
        return frozenset(f.name for f in dataclasses.fields(self.config_class)) | self.extra_keys

    def config_kwargs(self, model_cfg: ModelConfig, args: BuildArgs, *, pretrained: bool) -> dict[str, Any]:
        """Keyword arguments of the config class: CollaPipe's fields, then the checked ``hf_config``.

        A pretrained load keeps config.json's sizes and special ids and takes only the run fields.
        """
        run = {**self.run_fields(model_cfg, args), "use_cache": (False, "stages keep no cache")}
        set_by_us = {**self.size_fields(model_cfg, args), **special_id_fields(args), **run}
        kwargs = {key: value for key, (value, _) in (run if pretrained else set_by_us).items()}
        allowed = self.config_fields()
        for key, value in model_cfg.hf_config.items():
            where = f"model.hf_config.{key}"
            if key.startswith("_"):
                raise ValueError(f"{where}: private config attributes cannot be set")
            if key in set_by_us:
                raise ValueError(f"{where} is set by CollaPipe from {set_by_us[key][1]}; set that instead")
            if key in STRUCTURAL:
                raise ValueError(f"{where} cannot be set: {STRUCTURAL[key]}")
            if key not in allowed:
                raise ValueError(
                    f"{where}: {self.config_class.__name__} has no field {key!r}; "
                    "see its documentation for the fields it takes"
                )
            kwargs[key] = value
        return kwargs


def dropout_fields(model_cfg: ModelConfig, *keys: str) -> Fields:
    """Every dropout probability of the family set to ``model.dropout``."""
    return {key: (model_cfg.dropout, "model.dropout") for key in keys}


def special_id_fields(args: BuildArgs) -> Fields:
    return {
        "pad_token_id": (args.pad_id, "the data's pad_id"),
        "bos_token_id": (args.bos_id, "the data's bos_id"),
        "eos_token_id": (args.eos_id, "the data's eos_id"),
    }


class HfSplitModel(EncoderStackModel):
    """A transformers model as embedding (CU) -> blocks (devices) -> head (edge server).

    The parts hold the transformers model's own submodules; ``hf_model`` is that model, kept out of this
    module's tree so that parameter and state-dict names are the parts' (``embedding.*``,
    ``blocks.<i>.*``, ``head.*``). It shares every parameter with the parts; a tied parameter (input
    embedding and LM head) is one ``Parameter`` that appears under several state-dict names.
    ``mirrored_buffers`` are buffers of ``hf_model`` that a part registered as well (BART's
    ``final_logits_bias``); they are re-pointed after every ``.to()``/``.double()`` so both stay one tensor.
    """

    hf_model: Any

    def __init__(
        self,
        hf_model: nn.Module,
        embedding: nn.Module,
        blocks: Sequence[nn.Module],
        head: nn.Module,
        kind: str,
        mirrored_buffers: Sequence[tuple[nn.Module, str, nn.Module, str]] = (),
    ) -> None:
        super().__init__(embedding, blocks, head)
        self.kind = kind
        object.__setattr__(self, "hf_model", hf_model)  # not a submodule: see the class docstring
        self._mirrored = list(mirrored_buffers)  # (hf owner, name, part owner, name)

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> HfSplitModel:
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        for hf_owner, hf_name, part, part_name in self._mirrored:
            hf_owner._buffers[hf_name] = part._buffers[part_name]
        return self


@dataclass
class Unregistered:
    """Holds a module outside the owner's module tree (shared helpers without state, e.g. rotary)."""

    module: nn.Module = field(repr=False)


def checked_length(length: int, limit: int, what: str, field_name: str) -> None:
    """Refuse a sequence longer than the learned positions (an index error deep inside otherwise)."""
    if length > limit:
        raise ValueError(f"{what} length {length} exceeds the model's {limit} positions ({field_name})")


def bidirectional_mask(src_mask: Tensor, num_queries: int | None = None) -> Tensor:
    """(B, S) bool, True = real token -> (B, 1, Q, S) bool: every query may attend to every real key."""
    batch, length = src_mask.shape
    queries = length if num_queries is None else num_queries
    return src_mask[:, None, None, :].expand(batch, 1, queries, length)


def causal_mask(src_mask: Tensor) -> Tensor:
    """(B, S) bool, True = real token -> (B, 1, S, S) bool: query j may attend to the real keys ≤ j."""
    length = src_mask.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=src_mask.device).tril()  # (S, S)
    return causal[None, None, :, :] & src_mask[:, None, None, :]  # (B, 1, S, S)
