from __future__ import annotations

import pytest

from collapipe_core.data.sequences import causal_windows, classifier_rows, seq2seq_rows
from collapipe_core.data.vocab import SpecialIds

BART = SpecialIds(pad=1, bos=0, eos=2)


def test_classifier_rows_start_with_cls_and_cut_long_texts() -> None:
    src, cut = classifier_rows([[7, 8], [7, 8, 9, 10, 11]], seq_len=4, specials=BART)
    assert src.tolist() == [[0, 7, 8, 1], [0, 7, 8, 9]] and cut.tolist() == [False, True]


def test_seq2seq_targets_are_wrapped_and_cut_before_eos() -> None:
    src, tgt, cut = seq2seq_rows([[5, 6], [5]], [[7], [7, 8, 9, 10]], seq_len=2, target_len=3, specials=BART)
    assert src.tolist() == [[5, 6], [5, 1]]
    assert tgt.tolist() == [[0, 7, 2, 1], [0, 7, 8, 2]] and cut.tolist() == [False, True]


def test_padded_rows_need_a_pad_id() -> None:
    with pytest.raises(ValueError, match="pad id"):
        classifier_rows([[1]], seq_len=3, specials=SpecialIds(pad=None, bos=0, eos=0))


def test_causal_windows_join_documents_with_eos_and_drop_the_rest() -> None:
    src, tgt, first_document = causal_windows([[10, 11, 12], [20, 21], [30]], seq_len=2, eos=99)
    # stream: 10 11 12 99 20 21 99 30 99 -> windows of 3: [10 11 12] [99 20 21] [99 30 99]
    assert src.tolist() == [[10, 11], [99, 20], [99, 30]]
    assert tgt.tolist() == [[11, 12], [20, 21], [30, 99]]
    assert first_document.tolist() == [0, 0, 1]  # a window belongs to the document of its first token


def test_causal_windows_of_too_little_text_are_empty() -> None:
    src, tgt, first_document = causal_windows([[1]], seq_len=4, eos=2)
    assert src.shape == tgt.shape == (0, 4) and first_document.shape == (0,)
