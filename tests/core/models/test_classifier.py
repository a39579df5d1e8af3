"""The encoder classifier: parameter counts, CLS pooling, padding (its loss: test_losses.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from collapipe_core.config import ModelConfig
from collapipe_core.models import EncoderClassifier, build_model

SRC_VOCAB = 13
NUM_CLASSES = 5

BatchFactory = Callable[[int, int, int, int], tuple[torch.Tensor, torch.Tensor]]  # conftest.source_batch


def num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture
def model(classifier_cfg: ModelConfig) -> EncoderClassifier:
    built = build_model(classifier_cfg, SRC_VOCAB, NUM_CLASSES, seed=0).double()
    assert isinstance(built, EncoderClassifier)
    return built


def test_parameter_counts_of_each_part(model: EncoderClassifier, classifier_cfg: ModelConfig) -> None:
    d, f, s, c = classifier_cfg.d_model, classifier_cfg.ffn_dim, classifier_cfg.seq_len, NUM_CLASSES
    embedding = SRC_VOCAB * d + s * d
    teb = 4 * d * d + 2 * d * f + 9 * d + f
    head = 2 * d + (d * d + d) + (d * c + c)  # enc_norm, pooler, classifier

    assert num_params(model.embedding) == embedding
    assert [num_params(b) for b in model.blocks] == [teb] * classifier_cfg.num_blocks
    assert num_params(model.head) == head
    assert num_params(model) == embedding + classifier_cfg.num_blocks * teb + head


def test_logits_have_shape_batch_classes(model: EncoderClassifier, source_batch: BatchFactory) -> None:
    src, src_mask = source_batch(4, 10, SRC_VOCAB, 1)
    assert model(src, src_mask).shape == (4, NUM_CLASSES)


def test_padded_source_tokens_do_not_change_the_logits(
    model: EncoderClassifier, source_batch: BatchFactory
) -> None:
    src, src_mask = source_batch(6, 10, SRC_VOCAB, 1)
    other = src.clone()
    other[~src_mask] = torch.randint(
        1, SRC_VOCAB, (int((~src_mask).sum()),), generator=torch.Generator().manual_seed(5)
    )
    assert not torch.equal(other, src)
    torch.testing.assert_close(model(other, src_mask), model(src, src_mask))


def test_real_tokens_do_change_the_logits(model: EncoderClassifier, source_batch: BatchFactory) -> None:
    src, src_mask = source_batch(2, 10, SRC_VOCAB, 1)
    other = src.clone()
    other[:, 1] = other[:, 1] % (SRC_VOCAB - 1) + 1  # position 1 is real in every row
    assert not torch.allclose(model(other, src_mask), model(src, src_mask))


def test_an_all_padding_source_row_stays_finite(model: EncoderClassifier, source_batch: BatchFactory) -> None:
    src, src_mask = source_batch(3, 10, SRC_VOCAB, 1)
    src_mask[2] = False
    src[2] = 0
    logits = model(src, src_mask)
    logits.sum().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_forward_with_dropout_zero_is_deterministic_in_training_mode(
    model: EncoderClassifier, source_batch: BatchFactory
) -> None:
    model.train()
    src, src_mask = source_batch(4, 10, SRC_VOCAB, 1)
    assert torch.equal(model(src, src_mask), model(src, src_mask))


def test_the_head_refuses_decoder_inputs(model: EncoderClassifier, source_batch: BatchFactory) -> None:
    src, src_mask = source_batch(2, 10, SRC_VOCAB, 1)
    with pytest.raises(ValueError, match="takes no dec_in"):
        model(src, src_mask, torch.ones(2, 3, dtype=torch.long))
