"""The encoder-decoder: parameter counts, tied LM head, padding (its loss: test_losses.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from collapipe_core.config import ModelConfig
from collapipe_core.models import DecoderBlock, Seq2SeqTransformer, build_model

SRC_VOCAB = 13
TGT_VOCAB = 11

BatchFactory = Callable[[int, int, int, int], tuple[torch.Tensor, torch.Tensor]]  # conftest.source_batch


def num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def decoder_inputs(batch: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, TGT_VOCAB, (batch, length), generator=g)


@pytest.fixture
def model(seq2seq_cfg: ModelConfig) -> Seq2SeqTransformer:
    built = build_model(seq2seq_cfg, SRC_VOCAB, TGT_VOCAB, seed=0).double()
    assert isinstance(built, Seq2SeqTransformer)
    return built


@pytest.mark.parametrize(("d", "heads", "f"), [(16, 2, 24), (64, 4, 256)])
def test_decoder_block_has_8dd_plus_2df_plus_15d_plus_f_parameters(d: int, heads: int, f: int) -> None:
    # self qkv 3d²+3d, self out d²+d, cross q d²+d, cross kv 2d²+2d, cross out d²+d,
    # ff1 df+f, ff2 fd+d, three LayerNorms 3·2d
    assert num_params(DecoderBlock(d, heads, f, dropout=0.0)) == 8 * d * d + 2 * d * f + 15 * d + f


def test_parameter_counts_of_each_part(model: Seq2SeqTransformer, seq2seq_cfg: ModelConfig) -> None:
    d, f, s, t = seq2seq_cfg.d_model, seq2seq_cfg.ffn_dim, seq2seq_cfg.seq_len, seq2seq_cfg.target_len
    num_layers, num_blocks = seq2seq_cfg.num_decoder_layers, seq2seq_cfg.num_blocks
    embedding = SRC_VOCAB * d + s * d
    teb = 4 * d * d + 2 * d * f + 9 * d + f
    # enc_norm 2d + tgt_tok V_tgt·d + tgt_pos T·d + layers + final norm 2d; the tied lm_head adds nothing
    head = 2 * d + TGT_VOCAB * d + t * d + num_layers * (8 * d * d + 2 * d * f + 15 * d + f) + 2 * d

    assert num_params(model.embedding) == embedding
    assert [num_params(b) for b in model.blocks] == [teb] * num_blocks
    assert num_params(model.head) == head
    assert num_params(model) == embedding + num_blocks * teb + head


def test_lm_head_is_the_target_embedding(model: Seq2SeqTransformer, source_batch: BatchFactory) -> None:
    src, src_mask = source_batch(4, 10, SRC_VOCAB, 1)
    dec_in = torch.tensor([[1, 2, 1, 2, 1, 2, 1]] * 4)  # only ids 1 and 2 are looked up
    model(src, src_mask, dec_in).sum().backward()
    grad = model.head.tgt_tok.weight.grad
    assert grad is not None
    # the output projection reuses tgt_tok.weight, so rows never looked up still get gradient
    assert (grad[[0, *range(3, TGT_VOCAB)]].abs().sum(dim=1) > 0).all()


def test_logits_have_shape_batch_target_len_vocab(
    model: Seq2SeqTransformer, source_batch: BatchFactory
) -> None:
    src, src_mask = source_batch(4, 10, SRC_VOCAB, 1)
    assert model(src, src_mask, decoder_inputs(4, 7, seed=2)).shape == (4, 7, TGT_VOCAB)


def test_padded_source_tokens_do_not_change_the_logits(
    model: Seq2SeqTransformer, source_batch: BatchFactory
) -> None:
    src, src_mask = source_batch(6, 10, SRC_VOCAB, 1)
    dec_in = decoder_inputs(6, 7, seed=2)
    other = src.clone()
    other[~src_mask] = torch.randint(
        1, SRC_VOCAB, (int((~src_mask).sum()),), generator=torch.Generator().manual_seed(5)
    )
    assert not torch.equal(other, src)
    torch.testing.assert_close(model(other, src_mask, dec_in), model(src, src_mask, dec_in))


def test_an_all_padding_source_row_stays_finite(
    model: Seq2SeqTransformer, source_batch: BatchFactory
) -> None:
    src, src_mask = source_batch(3, 10, SRC_VOCAB, 1)
    src_mask[1] = False
    src[1] = 0
    logits = model(src, src_mask, decoder_inputs(3, 7, seed=2))
    logits.sum().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_forward_with_dropout_zero_is_deterministic_in_training_mode(
    model: Seq2SeqTransformer, source_batch: BatchFactory
) -> None:
    model.train()
    src, src_mask = source_batch(4, 10, SRC_VOCAB, 1)
    dec_in = decoder_inputs(4, 7, seed=2)
    assert torch.equal(model(src, src_mask, dec_in), model(src, src_mask, dec_in))


def test_the_head_needs_decoder_inputs(model: Seq2SeqTransformer, source_batch: BatchFactory) -> None:
    src, src_mask = source_batch(2, 10, SRC_VOCAB, 1)
    with pytest.raises(ValueError, match="needs dec_in"):
        model(src, src_mask)
    with pytest.raises(ValueError, match="exceeds target_len 7"):
        model(src, src_mask, decoder_inputs(2, 8, seed=2))
