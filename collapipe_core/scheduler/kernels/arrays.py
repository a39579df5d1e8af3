"""The arrays the kernels of ``costs.py`` and ``microbatches.py`` are compiled for: C-contiguous, writable
float64 or int64. numba compiles a separate signature for a read-only array (a broadcast view is one),
so such an input is copied: one signature per kernel keeps the warm cache complete."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

from collapipe_core.network import FloatArray

IntArray = npt.NDArray[np.int64]
_A = TypeVar("_A", bound=npt.NDArray[np.generic])


def floats(*arrays: npt.ArrayLike) -> tuple[FloatArray, ...]:
    """Each array as C-contiguous, writable float64 (a copy only where needed)."""
    return tuple(_writable(np.ascontiguousarray(x, dtype=np.float64)) for x in arrays)


def ints(*arrays: npt.ArrayLike) -> tuple[IntArray, ...]:
    """Each array as C-contiguous, writable int64 (a copy only where needed)."""
    return tuple(_writable(np.ascontiguousarray(x, dtype=np.int64)) for x in arrays)


def _writable(x: _A) -> _A:
    return x if x.flags.writeable else x.copy()
