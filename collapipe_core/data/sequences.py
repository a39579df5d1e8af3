"""Token ids of texts as the id matrices a task kind trains on, using the tokenizer's special ids.

- **classifier**: ``src`` (n, seq_len) = ``[BOS (the CLS token), t1 .. tk, PAD ..]``, k <= seq_len - 1.
- **seq2seq**: ``src`` (n, seq_len) = ``[s1 .. sk, PAD ..]``, k <= seq_len; ``tgt`` (n, target_len + 1)
  = ``[BOS, t1 .. tm, EOS, PAD ..]``, m <= target_len - 1 (the decoder reads ``tgt[:, :-1]`` and is
  scored on ``tgt[:, 1:]``).
- **causal_lm**: the documents, each followed by EOS, concatenated and cut into consecutive windows
  of seq_len + 1 tokens (a last, shorter rest is dropped); ``src = window[:-1]``,
  ``tgt = window[1:]``, both (n, seq_len) and never padded.

Classifier and seq2seq rows longer than their room keep their first tokens; the encoders return which
rows were cut so the caller can count them or refuse the file (``data.truncate``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from collapipe_core.data.partition import Indices
from collapipe_core.data.vocab import IdMatrix, SpecialIds

Flags = npt.NDArray[np.bool_]


def _pad_id(specials: SpecialIds) -> int:
    if specials.pad is None:
        raise ValueError("padded rows need a pad id; the tokenizer check should have refused this")
    return specials.pad


def _padded(rows: Sequence[Sequence[int]], width: int, pad: int, start: int = 0) -> IdMatrix:
    """(n, width): row i at columns start .. start+len-1 (cut to fit), ``pad`` elsewhere."""
    out = np.full((len(rows), width), pad, dtype=np.int64)
    room = width - start
    for i, row in enumerate(rows):
        kept = row[:room]
        out[i, start : start + len(kept)] = kept
    return out


def _too_long(rows: Sequence[Sequence[int]], room: int) -> Flags:
    return np.fromiter((len(row) > room for row in rows), dtype=np.bool_, count=len(rows))


def classifier_rows(
    ids: Sequence[Sequence[int]], seq_len: int, specials: SpecialIds
) -> tuple[IdMatrix, Flags]:
    """(src (n, seq_len), cut (n,)): CLS then the first seq_len - 1 tokens of each text."""
    src = _padded(ids, seq_len, _pad_id(specials), start=1)
    src[:, 0] = specials.bos
    return src, _too_long(ids, seq_len - 1)


def seq2seq_rows(
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    seq_len: int,
    target_len: int,
    specials: SpecialIds,
) -> tuple[IdMatrix, IdMatrix, Flags]:
    """(src (n, seq_len), tgt (n, target_len + 1), cut (n,)); cut: the source or the target was cut."""
    src = _padded(sources, seq_len, _pad_id(specials))
    kept = [target[: target_len - 1] for target in targets]
    tgt = _padded(kept, target_len + 1, _pad_id(specials), start=1)
    lengths = np.fromiter((len(target) for target in kept), dtype=np.int64, count=len(kept))
    tgt[:, 0] = specials.bos
    tgt[np.arange(len(kept)), lengths + 1] = specials.eos
    return src, tgt, _too_long(sources, seq_len) | _too_long(targets, target_len - 1)


def causal_windows(
    documents: Sequence[Sequence[int]], seq_len: int, eos: int
) -> tuple[IdMatrix, IdMatrix, Indices]:
    """(src (n, seq_len), tgt (n, seq_len), document of each window's first token (n,))."""
    lengths = np.fromiter((len(doc) + 1 for doc in documents), dtype=np.int64, count=len(documents))
    stream = np.full(int(lengths.sum()), eos, dtype=np.int64)
    ends = np.cumsum(lengths)
    for doc, end, length in zip(documents, ends.tolist(), lengths.tolist(), strict=True):
        stream[end - length : end - 1] = doc
    width = seq_len + 1
    num_windows = stream.size // width
    windows = stream[: num_windows * width].reshape(num_windows, width)
    owner = np.repeat(np.arange(len(documents), dtype=np.int64), lengths)
    first_document = owner[: num_windows * width : width].copy()
    return windows[:, :-1].copy(), windows[:, 1:].copy(), first_document
