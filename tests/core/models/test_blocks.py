"""The CU's embedding and the TEB: exact parameter counts, padding, masks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from collapipe_core.models import Embedding, EncoderBlock


def num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("vocab", "seq_len", "d"), [(13, 10, 16), (50, 24, 64), (4, 2, 8)])
def test_embedding_has_v_d_plus_s_d_parameters(vocab: int, seq_len: int, d: int) -> None:
    assert num_params(Embedding(vocab, seq_len, d, dropout=0.0)) == vocab * d + seq_len * d


@pytest.mark.parametrize(("d", "heads", "f"), [(16, 2, 24), (64, 4, 256), (8, 1, 3)])
def test_encoder_block_has_4dd_plus_2df_plus_9d_plus_f_parameters(d: int, heads: int, f: int) -> None:
    # qkv 3d²+3d, out d²+d, ff1 df+f, ff2 fd+d, two LayerNorms 2·2d
    assert num_params(EncoderBlock(d, heads, f, dropout=0.0)) == 4 * d * d + 2 * d * f + 9 * d + f


def test_embedding_refuses_a_source_longer_than_seq_len() -> None:
    embedding = Embedding(13, 4, 8, dropout=0.0)
    with pytest.raises(ValueError, match="exceeds seq_len 4"):
        embedding(torch.ones(2, 5, dtype=torch.long))


def test_encoder_block_ignores_padded_positions_and_stays_finite_on_all_padding() -> None:
    torch.manual_seed(0)
    block = EncoderBlock(16, 2, 24, dropout=0.0).double()
    h = torch.randn(3, 6, 16, dtype=torch.float64)
    src_mask = torch.tensor([[True] * 4 + [False] * 2, [True] * 6, [False] * 6])
    out = block(h, src_mask)

    changed = h.clone()
    changed[0, 4:] = torch.randn(2, 16, dtype=torch.float64)  # new content at padded positions only
    out_changed = block(changed, src_mask)

    torch.testing.assert_close(out_changed[0, :4], out[0, :4])  # real positions unaffected
    assert torch.isfinite(out).all()  # row 2 is all padding


def test_encoder_block_refuses_a_non_boolean_mask() -> None:
    block = EncoderBlock(8, 2, 8, dropout=0.0)
    with pytest.raises(ValueError, match="bool tensor with True for real tokens"):
        block(torch.zeros(1, 3, 8), torch.ones(1, 3, dtype=torch.long))
