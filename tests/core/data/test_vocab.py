from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, decode_tokens
from collapipe_core.data.vocab import SPECIAL_TOKENS, build_vocab, encode_rows, encode_targets


def test_special_ids_are_fixed() -> None:
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert build_vocab({})[:4] == SPECIAL_TOKENS


def test_vocab_is_sorted_after_the_specials() -> None:
    assert build_vocab({"b": 1, "a": 5, "c": 2}) == (*SPECIAL_TOKENS, "a", "b", "c")


def test_capped_vocab_keeps_the_most_frequent_tokens_sorted() -> None:
    assert build_vocab({"b": 1, "a": 5, "c": 2}, max_size=6) == (*SPECIAL_TOKENS, "a", "c")
    assert build_vocab({"b": 1}, max_size=100) == (*SPECIAL_TOKENS, "b")


def test_encode_rows_pads_and_maps_unknown_tokens_to_unk() -> None:
    vocab = (*SPECIAL_TOKENS, "a", "b")
    out = encode_rows(["ab", "bza", ""], vocab, width=5)
    assert out.dtype == np.int64
    assert out.tolist() == [[4, 5, 0, 0, 0], [5, UNK_ID, 4, 0, 0], [0, 0, 0, 0, 0]]
    assert encode_rows(["ab"], vocab, width=4, start=1).tolist() == [[0, 4, 5, 0]]


def test_encode_rows_refuses_rows_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        encode_rows(["abc"], (*SPECIAL_TOKENS, "a", "b", "c"), width=3, start=1)


def test_encode_targets_wraps_in_bos_and_eos() -> None:
    vocab = (*SPECIAL_TOKENS, "AH", "B")
    out = encode_targets([("B", "AH"), ("AH", "AH", "B")], vocab, target_len=4)
    assert out.tolist() == [[BOS_ID, 5, 4, EOS_ID, PAD_ID], [BOS_ID, 4, 4, 5, EOS_ID]]


def test_decode_stops_at_eos_and_skips_pad_and_bos() -> None:
    vocab = (*SPECIAL_TOKENS, "x", "y")
    assert decode_tokens([BOS_ID, 4, PAD_ID, 5, UNK_ID, EOS_ID, 4], vocab) == ["x", "y", "<unk>"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_tokens([9], vocab)
