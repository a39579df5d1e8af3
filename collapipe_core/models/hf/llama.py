"""LLaMA (``LlamaForCausalLM``) as a CollaPipe causal LM: embed_tokens | decoder layers | norm + lm_head.

- CU: ``h = embed_tokens(src)`` (no positions: LLaMA rotates queries and keys instead);
- device block i: ``model.layers[i]`` with the causal padding mask of ``src_mask``
  (:func:`.common.causal_mask`) and the rotary position embeddings (cos, sin) of positions 0..S−1 computed
  by the block itself with a ``LlamaRotaryEmbedding`` of the model's config (it has no parameters, only
  its inverse frequencies; it is kept outside the module tree, real even when the model is on meta);
- edge server: ``logits = lm_head(norm(h))``; ``lm_head`` is tied to ``embed_tokens`` only with
  ``hf_config: {tie_word_embeddings: true}``.

Grouped-query attention: ``model.num_kv_heads`` key/value heads (default ``num_heads``).
Shapes: B batch, S source length, d hidden_size, V vocabulary. Sources are right-padded.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from ...config import ModelConfig
from .common import BuildArgs, Family, Fields, HfSplitModel, Unregistered, causal_mask, dropout_fields


class LlamaEmbedding(nn.Module):
    """CU: the token embedding."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.embed_tokens = model.model.embed_tokens

    def forward(self, src: Tensor) -> Tensor:
        h: Tensor = self.embed_tokens(src)  # (B, S, d)
        return h


class LlamaBlock(nn.Module):
    """One device-side decoder layer: RMSNorm, rotary causal self-attention (GQA), RMSNorm, SwiGLU MLP."""

    def __init__(self, model: LlamaForCausalLM, index: int, rotary: Unregistered) -> None:
        super().__init__()
        self.layer = model.model.layers[index]
        self.rotary = rotary

    def forward(self, h: Tensor, src_mask: Tensor) -> Tensor:
        # h: (B, S, d); src_mask: (B, S) bool, True = real token
        positions = torch.arange(h.shape[1], device=h.device)[None, :]  # (1, S)
        mask = causal_mask(src_mask)  # (B, 1, S, S) bool
        cos_sin = self.rotary.module(h, positions)  # 2 × (1, S, head_dim)
        out: Tensor = self.layer(
            h, attention_mask=mask, position_ids=positions, position_embeddings=cos_sin, use_cache=False
        )  # (B, S, d)
        return out


class LlamaHead(nn.Module):
    """Edge server: final RMSNorm and the LM head."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.norm = model.model.norm
        self.lm_head = model.lm_head

    def forward(self, h: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        if dec_in is not None:
            raise ValueError("a causal LM head takes no dec_in; its targets are the next source tokens")
        logits: Tensor = self.lm_head(self.norm(h))  # (B, S, V)
        return logits


def _run_fields(model_cfg: ModelConfig, args: BuildArgs) -> Fields:
    return dropout_fields(model_cfg, "attention_dropout")


def split(model: LlamaForCausalLM) -> HfSplitModel:
    with torch.device("cpu"):  # real inverse frequencies even when the model is built on meta
        rotary = Unregistered(LlamaRotaryEmbedding(config=model.config))
    return HfSplitModel(
        model,
        LlamaEmbedding(model),
        [LlamaBlock(model, i, rotary) for i in range(len(model.model.layers))],
        LlamaHead(model),
        kind="causal_lm",
    )


FAMILY = Family(
    name="llama",
    kind="causal_lm",
    config_class=LlamaConfig,
    model_class=LlamaForCausalLM,
    run_fields=_run_fields,
    split=split,
    extra_keys=frozenset({"rope_theta"}),  # moved into rope_parameters by LlamaConfig
)
