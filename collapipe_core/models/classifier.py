"""Encoder-only classifier: TEBs on the devices, a BERT-style pooler and classifier on the edge server.

Shapes: B batch, S source length, d d_model, C number of classes.

Position 0 of every source is the CLS token and is never padding; the head reads only that position,
so the logits do not depend on what sits at padded positions.

Parameters of :class:`ClassifierHead`: enc_norm 2d + pooler (d² + d) + classifier (d·C + C).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .blocks import Embedding, EncoderBlock, EncoderStackModel


class ClassifierHead(nn.Module):
    """Edge server part: final encoder norm, CLS pooler (Linear + tanh), linear classifier."""

    def __init__(self, d_model: int, num_classes: int) -> None:
        super().__init__()
        self.enc_norm = nn.LayerNorm(d_model)  # here, not in the last TEB: all TEBs stay identical
        self.pooler = nn.Linear(d_model, d_model)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, h: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        # h: (B, S, d) output of the last TEB; src_mask is unused (CLS is never padding)
        if dec_in is not None:
            raise ValueError("the classifier head takes no dec_in; pass dec_in only to seq2seq models")
        cls = self.enc_norm(h)[:, 0]  # (B, d)
        pooled = torch.tanh(self.pooler(cls))  # (B, d)
        logits: Tensor = self.classifier(pooled)  # (B, C)
        return logits


class EncoderClassifier(EncoderStackModel):
    """model.kind == "classifier": forward(src, src_mask) -> logits (B, C)."""

    kind = "classifier"
    head: ClassifierHead

    def __init__(
        self,
        src_vocab_size: int,
        num_classes: int,
        seq_len: int,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        num_encoder_blocks: int,
        dropout: float,
    ) -> None:
        super().__init__(
            embedding=Embedding(src_vocab_size, seq_len, d_model, dropout),
            blocks=[EncoderBlock(d_model, num_heads, ffn_dim, dropout) for _ in range(num_encoder_blocks)],
            head=ClassifierHead(d_model, num_classes),
        )
