"""GPT-2 (``GPT2LMHeadModel``) as a CollaPipe causal LM: wte + wpe | h blocks | ln_f + lm_head.

- CU: ``h = drop(wte(src) + wpe(positions))``, positions 0..S−1 (as ``GPT2Model.forward``);
- device block i: ``transformer.h[i]`` with the causal padding mask of ``src_mask``
  (:func:`.common.causal_mask`, the mask the whole model builds);
- edge server: ``logits = lm_head(ln_f(h))``; ``lm_head.weight`` is ``wte.weight`` when
  ``tie_word_embeddings`` (the default), one ``Parameter`` on the CU and the edge server.

Shapes: B batch, S source length (≤ n_positions = model.seq_len), d n_embd, V vocabulary.
Sources are right-padded; a padded position's output is computed and ignored by the loss.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel

from ...config import ModelConfig
from .common import BuildArgs, Family, Fields, HfSplitModel, causal_mask, checked_length, dropout_fields


def _positions(h_or_src: Tensor) -> Tensor:
    return torch.arange(h_or_src.shape[1], device=h_or_src.device)[None, :]  # (1, S)


class Gpt2Embedding(nn.Module):
    """CU: token + learned position embedding, dropout."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        super().__init__()
        self.wte = model.transformer.wte
        self.wpe = model.transformer.wpe
        self.drop = model.transformer.drop

    def forward(self, src: Tensor) -> Tensor:
        checked_length(src.shape[1], self.wpe.num_embeddings, "source", "model.seq_len")
        h: Tensor = self.drop(self.wte(src) + self.wpe(_positions(src)))  # (B, S, d)
        return h


class Gpt2Block(nn.Module):
    """One device-side GPT-2 block: causal self-attention and MLP, pre-LN."""

    def __init__(self, model: GPT2LMHeadModel, index: int) -> None:
        super().__init__()
        self.block = model.transformer.h[index]

    def forward(self, h: Tensor, src_mask: Tensor) -> Tensor:
        # h: (B, S, d); src_mask: (B, S) bool, True = real token
        positions = _positions(h)  # (1, S)
        mask = causal_mask(src_mask)  # (B, 1, S, S) bool
        out: Tensor = self.block(h, attention_mask=mask, use_cache=False, position_ids=positions)  # (B, S, d)
        return out


class Gpt2Head(nn.Module):
    """Edge server: final LayerNorm and the LM head."""

    def __init__(self, model: GPT2LMHeadModel) -> None:
        super().__init__()
        self.ln_f = model.transformer.ln_f
        self.lm_head = model.lm_head

    def forward(self, h: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        if dec_in is not None:
            raise ValueError("a causal LM head takes no dec_in; its targets are the next source tokens")
        logits: Tensor = self.lm_head(self.ln_f(h))  # (B, S, V)
        return logits


def _run_fields(model_cfg: ModelConfig, args: BuildArgs) -> Fields:
    return dropout_fields(model_cfg, "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout")


def split(model: GPT2LMHeadModel) -> HfSplitModel:
    return HfSplitModel(
        model,
        Gpt2Embedding(model),
        [Gpt2Block(model, i) for i in range(len(model.transformer.h))],
        Gpt2Head(model),
        kind="causal_lm",
    )


FAMILY = Family(
    name="gpt2",
    kind="causal_lm",
    config_class=GPT2Config,
    model_class=GPT2LMHeadModel,
    run_fields=_run_fields,
    split=split,
)
