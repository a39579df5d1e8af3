"""Vocabularies and the mapping between token strings and padded id matrices.

Every vocabulary starts with the four special tokens (PAD=0, BOS=1, EOS=2, UNK=3); real tokens follow
from id 4 in sorted order, so the same data always gives the same ids. Classifiers use BOS as their
CLS token at position 0 of the source. Vocabularies are built from a whole dataset, never from one
split, so their size does not depend on the seed or on the cluster layout.

Subword tokenizers (:mod:`collapipe_core.data.tokenization`) keep PAD/BOS/EOS/UNK at the same ids; a
pretrained tokenizer brings its own (:class:`SpecialIds`), which the bundle carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")

IdMatrix = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SpecialIds:
    """The ids a dataset's tensors use for padding and sequence boundaries (defaults: the constants above)."""

    pad: int | None = PAD_ID  # None: the tokenizer has no padding token (only causal_lm, never padded)
    bos: int = BOS_ID  # also the classifier's CLS token at position 0
    eos: int = EOS_ID


def build_vocab(counts: Mapping[str, int], max_size: int | None = None) -> tuple[str, ...]:
    """Specials followed by the tokens of ``counts`` in sorted order: id -> token.

    When ``max_size`` (specials included) is smaller than the full vocabulary, the most frequent
    tokens are kept (ties broken by the token itself) and the rest will encode as UNK; this is how a
    model configured with a smaller ``model.vocab_size`` still receives only ids it can embed.
    """
    tokens = sorted(counts)
    if max_size is not None and len(SPECIAL_TOKENS) + len(tokens) > max_size:
        by_frequency = sorted(tokens, key=lambda token: (-counts[token], token))
        tokens = sorted(by_frequency[: max(0, max_size - len(SPECIAL_TOKENS))])
    return SPECIAL_TOKENS + tuple(tokens)


def encode_rows(
    rows: Sequence[Sequence[str]], vocab: tuple[str, ...], width: int, start: int = 0
) -> IdMatrix:
    """Token rows as an (n, width) int64 matrix, row i at columns ``start .. start+len-1``, PAD after.

    Tokens missing from ``vocab`` become UNK. A row that does not fit raises ValueError: callers
    filter or truncate first, so an overflow here is a bug, not data.
    """
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    if len(rows) and int(lengths.max()) + start > width:
        raise ValueError(f"a row of {int(lengths.max())} tokens does not fit {width - start} columns")
    index = {token: i for i, token in enumerate(vocab) if i >= len(SPECIAL_TOKENS)}
    flat = np.fromiter(
        (index.get(token, UNK_ID) for row in rows for token in row), dtype=np.int64, count=int(lengths.sum())
    )
    # Scatter the flat ids into their (row, column) cells.
    row_ids = np.repeat(np.arange(len(rows)), lengths)
    row_starts = np.cumsum(lengths) - lengths
    columns = np.arange(flat.size) - np.repeat(row_starts, lengths) + start
    out = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    out[row_ids, columns] = flat
    return out


def encode_targets(rows: Sequence[Sequence[str]], vocab: tuple[str, ...], target_len: int) -> IdMatrix:
    """Seq2seq targets as (n, target_len + 1) int64: [BOS, t1..tm, EOS, PAD...], m <= target_len - 1.

    The decoder reads ``tgt[:, :-1]`` and is scored against ``tgt[:, 1:]`` with PAD ignored.
    """
    out = encode_rows(rows, vocab, width=target_len + 1, start=1)
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    out[:, 0] = BOS_ID
    out[np.arange(len(rows)), lengths + 1] = EOS_ID
    return out


def decode_tokens(ids: Sequence[int], vocab: tuple[str, ...]) -> list[str]:
    """Token strings of ``ids``: stops at the first EOS and skips PAD and BOS (UNK stays visible)."""
    tokens: list[str] = []
    for raw in ids:
        token_id = int(raw)
        if token_id == EOS_ID:
            break
        if token_id in (PAD_ID, BOS_ID):
            continue
        if not 0 <= token_id < len(vocab):
            raise ValueError(f"token id {token_id} is outside the vocabulary of {len(vocab)} tokens")
        tokens.append(vocab[token_id])
    return tokens
