"""The pieces shared by both models: the CU's embedding, the Transformer Encoder Block (TEB), attention.

Every model is ``embedding -> blocks[0] -> ... -> blocks[L-1] -> head``:

- :class:`Embedding` runs on the cluster's control unit (CU);
- the ``L`` identical :class:`EncoderBlock` s (TEBs) are cut into contiguous segments, one per device;
- the head (decoder or classifier, see :mod:`.seq2seq` and :mod:`.classifier`) runs on the edge server.

:class:`EncoderStackModel` is that skeleton; the split itself lives in :mod:`collapipe_core.pipeline.split`.

Shapes: B batch, S source length (≤ s = seq_len), d d_model, H num_heads, f ffn_dim.
``src_mask`` is (B, S) bool, True = real token, False = padding.

Fully padded attention rows: padded *keys* are masked out with a boolean mask given to
``F.scaled_dot_product_attention``. A query whose keys are all padding (a sample that is all padding)
gets attention output 0 in torch ≥ 2.5 (torch 2.13 is pinned; the tests check that such a row stays
finite). Real data never produces that row: position 0 is always a real token (BOS/CLS).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def key_padding_mask(src_mask: Tensor) -> Tensor:
    """(B, S) bool, True = real token -> (B, 1, 1, S) boolean attention mask (True = may attend)."""
    if src_mask.dtype != torch.bool or src_mask.dim() != 2:
        raise ValueError(
            f"src_mask must be a (batch, seq) bool tensor with True for real tokens, "
            f"got dtype {src_mask.dtype} and shape {tuple(src_mask.shape)}"
        )
    return src_mask[:, None, None, :]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, N, d) -> (B, H, N, d/H)."""
    batch, length, d_model = x.shape
    return x.view(batch, length, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, N, d/H) -> (B, N, d)."""
    batch, num_heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, num_heads * head_dim)


class Embedding(nn.Module):
    """Token + learned position embedding (on the CU). Parameters: V·d + s·d."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, src: Tensor) -> Tensor:
        _, length = src.shape  # src: (B, S) int64
        if length > self.pos.num_embeddings:
            raise ValueError(f"source length {length} exceeds seq_len {self.pos.num_embeddings}")
        positions = torch.arange(length, device=src.device)  # (S,)
        h: Tensor = self.drop(self.tok(src) + self.pos(positions))  # (B, S, d)
        return h


class EncoderBlock(nn.Module):
    """One TEB, pre-LN. Parameters: 4d² + 2df + 9d + f.

    Forward FLOPs per sample: 2·s·(4d² + 2df) for the four matmul groups (qkv 3d², out d², FFN 2df)
    plus 4·s²·d for QKᵀ and AV — the count the cost model uses.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn_dim)
        self.act = nn.GELU()
        self.ff2 = nn.Linear(ffn_dim, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: Tensor, src_mask: Tensor) -> Tensor:
        # h: (B, S, d); src_mask: (B, S) bool
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)  # 3 × (B, S, d)
        attn = F.scaled_dot_product_attention(
            split_heads(q, self.num_heads),  # (B, H, S, d/H)
            split_heads(k, self.num_heads),
            split_heads(v, self.num_heads),
            attn_mask=key_padding_mask(src_mask),  # (B, 1, 1, S)
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, H, S, d/H)
        h = h + self.drop(self.out(merge_heads(attn)))  # (B, S, d)
        h = h + self.drop(self.ff2(self.act(self.ff1(self.ln2(h)))))  # (B, S, f) inside, (B, S, d) out
        return h


class EncoderStackModel(nn.Module):
    """embedding (CU) -> L blocks (devices) -> head (edge server). Subclasses build the parts.

    The interface every split model has, builtin or Hugging Face (:mod:`.hf`): ``embedding(src) -> h``,
    ``blocks[i](h, src_mask) -> h``, ``head(h, src_mask, dec_in=None) -> logits`` and ``kind``.
    """

    kind: str

    def __init__(self, embedding: nn.Module, blocks: Sequence[nn.Module], head: nn.Module) -> None:
        super().__init__()
        self.embedding = embedding
        self.blocks = nn.ModuleList(blocks)
        self.head = head

    def forward(self, src: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        h = self.embedding(src)  # (B, S, d)
        for block in self.blocks:
            h = block(h, src_mask)  # (B, S, d)
        logits: Tensor = self.head(h, src_mask, dec_in)  # (B, T, V_tgt) or (B, C)
        return logits
