"""Scalar helpers shared by the compiled kernels: the jit settings, numpy's float min/max and pairwise sum
over a row, a stable insertion sort, and the conversions to the contiguous float64/int64 arrays the
kernels are compiled for (one signature per kernel, so a warm cache covers every call).

numba's disk cache of a kernel is checked against the kernel's own file only, not against the files whose
jit functions it compiles in. So every kernel file carries a digest (the first 16 hex digits of the
SHA-256) of each such file — ``SCALARS_SHA256`` of this one, ``BANDWIDTH_SHA256``, ``COSTS_SHA256`` — and
after a change there the digests are updated (tests/core/scheduler/kernels/test_cache.py lists the pairs,
fails until then and prints the new digest), which changes the kernel files and recompiles them.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.problem import IntArray

INF = math.inf
# compiled on first use, cached on disk (docs/scheduler.md: compile time, warm-up)
jit = numba.njit(cache=True, error_model="numpy", nogil=True)


def as_floats(*arrays: FloatArray) -> tuple[FloatArray, ...]:
    """Each array as C-contiguous float64."""
    return tuple(np.ascontiguousarray(x, dtype=np.float64) for x in arrays)


def as_ints(x: IntArray) -> IntArray:
    """The array as C-contiguous int64."""
    return np.ascontiguousarray(x, dtype=np.int64)


@jit
def sort_order(x, descending, idx):  # type: ignore[no-untyped-def]
    """Indices sorting x (ascending or descending) into idx, ties in index order (insertion sort)."""
    k = x.shape[0]
    for i in range(k):
        idx[i] = i
    for i in range(1, k):
        j = i
        while j > 0:
            prev, cur = x[idx[j - 1]], x[idx[j]]
            if (cur > prev) if descending else (cur < prev):
                idx[j - 1], idx[j] = idx[j], idx[j - 1]
                j -= 1
            else:
                break
    return idx


@jit
def row_sum(x, n):  # type: ignore[no-untyped-def]
    """Σ x[:n] in numpy's order for a contiguous row (pairwise: sequential below 8, 8 accumulators to 128)."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[i]
        return res
    if n <= 128:
        r = x[:8].copy()
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += x[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += x[i]
            i += 1
        return res
    half = n // 2
    half -= half % 8
    return row_sum(x[:half], half) + row_sum(x[half:], n - half)


@jit
def fmin(x, y):  # type: ignore[no-untyped-def]
    """np.minimum of two floats (NaN propagates)."""
    return x if (x <= y or x != x) else y


@jit
def fmax(x, y):  # type: ignore[no-untyped-def]
    """np.maximum of two floats (NaN propagates)."""
    return x if (x >= y or x != x) else y
