"""The step loss of every kind: summed cross-entropy terms, counted without PAD, and their mean."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from collapipe_core.models import loss_for, source_mask, split_targets

VOCAB, NUM_CLASSES = 11, 5


def test_token_loss_sums_and_counts_only_non_pad_targets() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 4, VOCAB, generator=g, dtype=torch.float64)
    target = torch.tensor([[5, 2, 0, 0], [1, 7, 3, 0]])
    real = target != 0
    for kind in ("seq2seq", "causal_lm"):
        loss = loss_for(kind)
        torch.testing.assert_close(
            loss.sum(logits, target), F.cross_entropy(logits[real], target[real], reduction="sum")
        )
        assert loss.num_terms(target) == 5
        torch.testing.assert_close(loss.mean(logits, target), F.cross_entropy(logits[real], target[real]))


def test_the_data_s_pad_id_is_the_one_ignored() -> None:
    logits = torch.randn(1, 3, VOCAB, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.tensor([[0, 9, 9]])  # 0 is a real token here, 9 the padding
    loss = loss_for("causal_lm", pad_id=9)
    assert loss.num_terms(target) == 1
    torch.testing.assert_close(
        loss.sum(logits, target), F.cross_entropy(logits[0, :1], target[0, :1], reduction="sum")
    )


def test_classifier_loss_counts_every_sample_even_class_zero() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, NUM_CLASSES, generator=g, dtype=torch.float64)
    target = torch.tensor([0, 4, 2, 0])  # class 0 has the PAD id but is a label
    loss = loss_for("classifier")
    expected = torch.stack([F.cross_entropy(logits[i], target[i]) for i in range(4)])
    assert loss.num_terms(target) == 4
    torch.testing.assert_close(loss.sum(logits, target), expected.sum())
    torch.testing.assert_close(loss.mean(logits, target), expected.mean())


def test_a_batch_of_padding_only_is_refused() -> None:
    with pytest.raises(ValueError, match="every target of the batch is padding"):
        loss_for("seq2seq").mean(torch.zeros(1, 2, VOCAB), torch.zeros(1, 2, dtype=torch.long))


def test_targets_split_into_decoder_inputs_and_labels_per_kind() -> None:
    tgt = torch.tensor([[1, 5, 6, 2, 0]])
    dec_in, labels = split_targets("seq2seq", tgt)
    assert dec_in is not None and dec_in.tolist() == [[1, 5, 6, 2]] and labels.tolist() == [[5, 6, 2, 0]]
    dec_in, labels = split_targets("causal_lm", tgt)
    assert dec_in is None and labels is tgt
    classes = torch.tensor([3, 1])
    dec_in, labels = split_targets("classifier", classes)
    assert dec_in is None and labels is classes


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown model kind 'lm'"):
        loss_for("lm")
    with pytest.raises(ValueError, match="unknown model kind 'lm'"):
        split_targets("lm", torch.zeros(1, 2))


def test_without_a_pad_id_every_target_is_a_term() -> None:
    logits = torch.randn(2, 3, VOCAB, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    target = torch.tensor([[0, 4, 0], [1, 2, 3]])  # 0 is a token like any other here
    loss = loss_for("causal_lm", pad_id=None)
    assert loss.num_terms(target) == 6
    torch.testing.assert_close(
        loss.mean(logits, target), F.cross_entropy(logits.flatten(0, 1), target.flatten())
    )
    assert source_mask(target, None).all()
    assert source_mask(target, 0).tolist() == [[False, True, False], [True, True, True]]
