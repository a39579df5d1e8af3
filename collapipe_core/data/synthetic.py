"""Tiny generated tasks for fast tests: reverse a letter string (seq2seq) or tell its parity (classifier).

Sequences are drawn from the experiment seed over the alphabet ``a``–``h`` with lengths uniform in
``[min(2, max_len), max_len]`` and are distinct, so the held-out set never repeats a training input.
- synthetic-reverse: target = the source letters in reverse order.
- synthetic-parity: label 1 ("odd") when the source has an odd number of ``a``, else 0 ("even").
"""

from __future__ import annotations

import numpy as np

from collapipe_core.data.seeding import stream_rng

ALPHABET = "abcdefgh"
PARITY_CLASSES = ("even", "odd")
LICENCE = "none needed (generated from the experiment seed)"
_BATCH = 4096  # strings drawn per round; fixed, so a smaller pool is a prefix of a larger one


def generate_strings(seed: int, num_strings: int, max_len: int, stream: str) -> tuple[str, ...]:
    """Up to ``num_strings`` distinct random strings.

    Fewer come back only when ``max_len`` is so small that the possible strings are (nearly) used
    up: generation stops once a whole round of draws finds nothing new.

    The result for n strings is the prefix of the result for any m > n, so runs that differ only in
    cluster count or shard size see the same strings first.
    """
    rng = stream_rng(seed, f"synthetic:{stream}")
    min_len = min(2, max_len)
    codes = np.frombuffer(ALPHABET.encode("ascii"), dtype=np.uint8)
    strings: dict[str, None] = {}  # insertion-ordered set: draw order is the dataset order
    while len(strings) < num_strings:
        before = len(strings)
        lengths = rng.integers(min_len, max_len + 1, size=_BATCH)
        letters = codes[rng.integers(0, len(ALPHABET), size=(_BATCH, max_len))].tobytes()  # (batch, max_len)
        for row, length in enumerate(lengths.tolist()):
            start = row * max_len
            strings.setdefault(letters[start : start + length].decode("ascii"), None)
        if len(strings) == before:  # a whole round found nothing new: every string exists already
            break
    return tuple(strings)[:num_strings]


def reverse_pairs(seed: int, num_pairs: int, max_len: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(source, reversed source as tokens) pairs for synthetic-reverse."""
    return tuple((s, tuple(reversed(s))) for s in generate_strings(seed, num_pairs, max_len, "reverse"))


def parity_samples(seed: int, num_samples: int, max_len: int) -> tuple[tuple[str, int], ...]:
    """(source, label) pairs for synthetic-parity; label = count of 'a' mod 2."""
    return tuple((s, s.count("a") % 2) for s in generate_strings(seed, num_samples, max_len, "parity"))
