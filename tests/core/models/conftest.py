"""Small configs and batches for the model tests (float64 comparisons, dropout 0)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from collapipe_core.config import ModelConfig


@pytest.fixture
def seq2seq_cfg() -> ModelConfig:
    # ffn_dim is deliberately not 4·d so a formula that mixes up d and f fails
    return ModelConfig(
        kind="seq2seq",
        d_model=16,
        num_heads=2,
        ffn_dim=24,
        num_blocks=3,
        num_decoder_layers=2,
        seq_len=10,
        target_len=7,
        dropout=0.0,
    )


@pytest.fixture
def classifier_cfg() -> ModelConfig:
    return ModelConfig(
        kind="classifier", d_model=16, num_heads=4, ffn_dim=40, num_blocks=3, seq_len=10, dropout=0.0
    )


def make_source(batch: int, seq_len: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, src_mask): random lengths in [2, seq_len], position 0 always real, PAD id 0 after the end."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, seq_len + 1, (batch,), generator=g)
    lengths[0] = 2  # at least one short, heavily padded row
    src_mask = torch.arange(seq_len)[None, :] < lengths[:, None]  # (B, S) bool
    src = torch.randint(1, vocab, (batch, seq_len), generator=g).masked_fill(~src_mask, 0)
    return src, src_mask


@pytest.fixture
def source_batch() -> Callable[[int, int, int, int], tuple[torch.Tensor, torch.Tensor]]:
    """make_source(batch, seq_len, vocab, seed)."""
    return make_source
