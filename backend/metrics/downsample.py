"""Server-side downsampling of long series: LTTB for charts, bucket min/max or mean.

All functions take x (rounds, increasing) and y and return the kept points; a series with at most
``max_points`` points is returned unchanged.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

import numpy as np
import numpy.typing as npt

Method = Literal["lttb", "minmax", "mean", "none"]
Floats = npt.NDArray[np.float64]


def downsample(x: Floats, y: Floats, max_points: int, method: Method) -> tuple[Floats, Floats]:
    if method == "none" or len(x) <= max_points:
        return x, y
    if method == "lttb":
        keep = lttb_indices(x, y, max_points)
        return x[keep], y[keep]
    if method == "minmax":
        keep = minmax_indices(y, max_points)
        return x[keep], y[keep]
    return bucket_means(x, y, max_points)


def _buckets(n: int, count: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, count + 1).astype(int)
    return [(int(a), int(b)) for a, b in pairwise(edges) if b > a]


def lttb_indices(x: Floats, y: Floats, max_points: int) -> npt.NDArray[np.int64]:
    """Largest-Triangle-Three-Buckets (Steinarsson 2013): first, last, and per bucket the point that
    spans the largest triangle with the previous kept point and the next bucket's mean."""
    n = len(x)
    if max_points < 3:
        return np.array([0, n - 1][:max_points], dtype=np.int64)
    inner = _buckets(n - 2, max_points - 2)
    kept = [0]
    for i, (start, stop) in enumerate(inner):
        a = kept[-1]
        if i + 1 < len(inner):
            ns, ne = inner[i + 1]
            nx, ny = x[1 + ns : 1 + ne].mean(), y[1 + ns : 1 + ne].mean()
        else:
            nx, ny = x[n - 1], y[n - 1]
        bx, by = x[1 + start : 1 + stop], y[1 + start : 1 + stop]
        area = np.abs((x[a] - nx) * (by - y[a]) - (x[a] - bx) * (ny - y[a]))
        kept.append(1 + start + int(np.argmax(area)))
    kept.append(n - 1)
    return np.array(kept, dtype=np.int64)


def minmax_indices(y: Floats, max_points: int) -> npt.NDArray[np.int64]:
    """Per bucket the smallest and the largest point (extremes survive), in x order."""
    keep: list[int] = []
    for start, stop in _buckets(len(y), max(1, max_points // 2)):
        lo, hi = start + int(np.argmin(y[start:stop])), start + int(np.argmax(y[start:stop]))
        keep.extend(sorted({lo, hi}))
    return np.array(keep, dtype=np.int64)


def bucket_means(x: Floats, y: Floats, max_points: int) -> tuple[Floats, Floats]:
    buckets = _buckets(len(x), max_points)
    return (
        np.array([x[a:b].mean() for a, b in buckets], dtype=np.float64),
        np.array([y[a:b].mean() for a, b in buckets], dtype=np.float64),
    )
