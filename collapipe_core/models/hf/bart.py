"""BART (``BartForConditionalGeneration``) as a CollaPipe seq2seq model: embedding | encoder | decoder.

- CU: ``h = dropout(layernorm_embedding(shared(src)·scale + embed_positions(0..S−1)))`` — the
  prologue of ``BartEncoder.forward``, with the encoder's own modules;
- device block i: ``encoder.layers[i]`` with the bidirectional padding mask of ``src_mask``
  (:func:`.common.bidirectional_mask`, the mask ``BartEncoder`` builds);
- edge server: ``model.decoder(dec_in, encoder_hidden_states=h)`` with a causal self-attention mask and
  a cross-attention mask over the real source tokens (4-D, :mod:`.common`), then
  ``logits = lm_head(y) + final_logits_bias``.

BART ties ``shared``, ``encoder.embed_tokens``, ``decoder.embed_tokens`` and ``lm_head``: one
``Parameter``, on the CU (source embedding) and on the edge server (target embedding and LM head).
``final_logits_bias`` is a buffer of the edge server's part. LayerDrop is 0: the split runs every layer.

Shapes: B batch, S source length, T decoder length (both ≤ max_position_embeddings =
max(model.seq_len, model.target_len)), d d_model, V vocabulary (shared by source and target).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import BartConfig, BartForConditionalGeneration

from ...config import ModelConfig
from .common import (
    BuildArgs,
    Family,
    Fields,
    HfSplitModel,
    bidirectional_mask,
    causal_mask,
    checked_length,
    dropout_fields,
)

POSITIONS = "max(model.seq_len, model.target_len)"


def _num_positions(model: BartForConditionalGeneration) -> int:
    return int(model.config.max_position_embeddings)


class BartEmbedding(nn.Module):
    """CU: scaled shared token embedding + learned positions, LayerNorm, dropout."""

    def __init__(self, model: BartForConditionalGeneration) -> None:
        super().__init__()
        encoder = model.model.encoder
        self.embed_tokens = encoder.embed_tokens  # is model.model.shared (tied)
        self.embed_positions = encoder.embed_positions
        self.layernorm_embedding = encoder.layernorm_embedding
        self.dropout = float(encoder.dropout)
        self.num_positions = _num_positions(model)

    def forward(self, src: Tensor) -> Tensor:
        checked_length(src.shape[1], self.num_positions, "source", POSITIONS)
        h = self.embed_tokens(src) + self.embed_positions(src)  # (B, S, d); positions from the shape
        h = self.layernorm_embedding(h)
        return F.dropout(h, p=self.dropout, training=self.training)  # (B, S, d)


class BartBlock(nn.Module):
    """One device-side encoder layer: self-attention over real tokens, feed-forward, post-LN."""

    def __init__(self, model: BartForConditionalGeneration, index: int) -> None:
        super().__init__()
        self.layer = model.model.encoder.layers[index]

    def forward(self, h: Tensor, src_mask: Tensor) -> Tensor:
        # h: (B, S, d); src_mask: (B, S) bool, True = real token
        mask = bidirectional_mask(src_mask)  # (B, 1, S, S) bool
        out: Tensor = self.layer(h, mask)  # (B, S, d)
        return out


class BartHead(nn.Module):
    """Edge server: the whole decoder, the tied LM head and the final logits bias."""

    final_logits_bias: Tensor

    def __init__(self, model: BartForConditionalGeneration) -> None:
        super().__init__()
        self.decoder = model.model.decoder  # its embed_tokens is model.model.shared (tied)
        self.lm_head = model.lm_head  # its weight is model.model.shared.weight (tied)
        self.register_buffer("final_logits_bias", model.final_logits_bias)  # (1, V), the same tensor
        self.num_positions = _num_positions(model)

    def forward(self, h: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        # h: (B, S, d) encoder output; src_mask: (B, S) bool; dec_in: (B, T) int64
        if dec_in is None:
            raise ValueError("the seq2seq head needs dec_in, the (batch, target_len) decoder input ids")
        checked_length(dec_in.shape[1], self.num_positions, "decoder input", POSITIONS)
        self_mask = causal_mask(torch.ones_like(dec_in, dtype=torch.bool))  # (B, 1, T, T)
        cross_mask = bidirectional_mask(src_mask, num_queries=dec_in.shape[1])  # (B, 1, T, S)
        y = self.decoder(
            input_ids=dec_in,
            attention_mask=self_mask,
            encoder_hidden_states=h,
            encoder_attention_mask=cross_mask,
            use_cache=False,
        ).last_hidden_state  # (B, T, d)
        logits: Tensor = self.lm_head(y) + self.final_logits_bias.to(y.device)  # (B, T, V)
        return logits


def _run_fields(model_cfg: ModelConfig, args: BuildArgs) -> Fields:
    every_layer = "the split, which runs every layer"
    return {
        **dropout_fields(
            model_cfg, "dropout", "attention_dropout", "activation_dropout", "classifier_dropout"
        ),
        "encoder_layerdrop": (0.0, every_layer),
        "decoder_layerdrop": (0.0, every_layer),
    }


def split(model: BartForConditionalGeneration) -> HfSplitModel:
    head = BartHead(model)
    return HfSplitModel(
        model,
        BartEmbedding(model),
        [BartBlock(model, i) for i in range(len(model.model.encoder.layers))],
        head,
        kind="seq2seq",
        mirrored_buffers=[(model, "final_logits_bias", head, "final_logits_bias")],
    )


FAMILY = Family(
    name="bart",
    kind="seq2seq",
    config_class=BartConfig,
    model_class=BartForConditionalGeneration,
    run_fields=_run_fields,
    split=split,
)
