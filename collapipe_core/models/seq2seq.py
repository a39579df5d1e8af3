"""Encoder-decoder Transformer: TEBs on the devices, the decoder and the LM head on the edge server.

Shapes: B batch, S source length, T target length (≤ target_len), d d_model, f ffn_dim,
V_tgt target vocabulary. PAD targets are ignored by the loss (:mod:`.losses`).

Target padding is trailing (real tokens, then PAD): the causal self-attention then never lets a
real position see a PAD, so the decoder needs no target padding mask. Outputs at PAD positions are
computed but ignored by :func:`loss_fn`.

Parameters of :class:`Seq2SeqHead` (the lm_head is tied to ``tgt_tok`` and adds none):
    enc_norm 2d + tgt_tok V_tgt·d + tgt_pos T·d + num_decoder_layers·(8d² + 2df + 15d + f) + final norm 2d.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blocks import Embedding, EncoderBlock, EncoderStackModel, key_padding_mask, merge_heads, split_heads


class DecoderBlock(nn.Module):
    """Pre-LN decoder layer: causal self-attention, cross-attention, FFN. Parameters: 8d² + 2df + 15d + f."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.self_qkv = nn.Linear(d_model, 3 * d_model)
        self.self_out = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.cross_q = nn.Linear(d_model, d_model)
        self.cross_kv = nn.Linear(d_model, 2 * d_model)
        self.cross_out = nn.Linear(d_model, d_model)
        self.ln3 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn_dim)
        self.act = nn.GELU()
        self.ff2 = nn.Linear(ffn_dim, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, y: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        # y: (B, T, d) decoder stream; memory: (B, S, d) encoder output; memory_mask: (B, 1, 1, S) bool
        p = self.dropout if self.training else 0.0
        q, k, v = self.self_qkv(self.ln1(y)).chunk(3, dim=-1)  # 3 × (B, T, d)
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))  # (B, H, T, d/H)
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, H, T, d/H)
        y = y + self.drop(self.self_out(merge_heads(attn)))  # (B, T, d)

        q = split_heads(self.cross_q(self.ln2(y)), self.num_heads)  # (B, H, T, d/H)
        k, v = self.cross_kv(memory).chunk(2, dim=-1)  # 2 × (B, S, d)
        k, v = split_heads(k, self.num_heads), split_heads(v, self.num_heads)  # (B, H, S, d/H)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=memory_mask, dropout_p=p)  # (B, H, T, d/H)
        y = y + self.drop(self.cross_out(merge_heads(attn)))  # (B, T, d)

        y = y + self.drop(self.ff2(self.act(self.ff1(self.ln3(y)))))  # (B, T, d)
        return y


class Seq2SeqHead(nn.Module):
    """Edge server part: final encoder norm, target embedding, decoder layers, tied LM head."""

    def __init__(
        self,
        tgt_vocab_size: int,
        target_len: int,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        num_decoder_layers: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.enc_norm = nn.LayerNorm(d_model)  # here, not in the last TEB: all TEBs stay identical
        self.tgt_tok = nn.Embedding(tgt_vocab_size, d_model)
        self.tgt_pos = nn.Embedding(target_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderBlock(d_model, num_heads, ffn_dim, dropout) for _ in range(num_decoder_layers)
        )
        self.norm = nn.LayerNorm(d_model)

    def forward(self, h: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        # h: (B, S, d) output of the last TEB; src_mask: (B, S) bool; dec_in: (B, T) int64
        if dec_in is None:
            raise ValueError("the seq2seq head needs dec_in, the (batch, target_len) decoder input ids")
        _, length = dec_in.shape
        if length > self.tgt_pos.num_embeddings:
            raise ValueError(
                f"decoder input length {length} exceeds target_len {self.tgt_pos.num_embeddings}"
            )
        memory = self.enc_norm(h)  # (B, S, d)
        memory_mask = key_padding_mask(src_mask)  # (B, 1, 1, S)
        positions = torch.arange(length, device=dec_in.device)  # (T,)
        y = self.drop(self.tgt_tok(dec_in) + self.tgt_pos(positions))  # (B, T, d)
        for layer in self.layers:
            y = layer(y, memory, memory_mask)  # (B, T, d)
        y = self.norm(y)  # (B, T, d)
        return F.linear(y, self.tgt_tok.weight)  # (B, T, V_tgt); lm_head tied to tgt_tok, no bias


class Seq2SeqTransformer(EncoderStackModel):
    """model.kind == "seq2seq": forward(src, src_mask, dec_in) -> logits (B, T, V_tgt)."""

    kind = "seq2seq"
    head: Seq2SeqHead

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        seq_len: int,
        target_len: int,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        num_encoder_blocks: int,
        num_decoder_layers: int,
        dropout: float,
    ) -> None:
        super().__init__(
            embedding=Embedding(src_vocab_size, seq_len, d_model, dropout),
            blocks=[EncoderBlock(d_model, num_heads, ffn_dim, dropout) for _ in range(num_encoder_blocks)],
            head=Seq2SeqHead(
                tgt_vocab_size, target_len, d_model, num_heads, ffn_dim, num_decoder_layers, dropout
            ),
        )
