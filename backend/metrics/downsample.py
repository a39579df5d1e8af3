"""Server-side downsampling of long series: LTTB for charts, bucket min/max or mean.

All functions take x (rounds, increasing) and y and return the kept points; a series with at most
``max_points`` points is returned unchanged. ``along`` is a companion of x (the modeled elapsed time
at each round): it is kept at the same points, or averaged over the same buckets.

Cost: everything that does not depend on earlier choices is computed with whole-array numpy
(bucket edges, next-bucket means, per-bucket extremes and means). LTTB's choice in one bucket depends
on the point kept in the previous one, so that part stays a loop over buckets; a narrow bucket is
scanned with Python floats (cheaper than a numpy call on a few elements), a wide one with numpy.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

Method = Literal["lttb", "minmax", "mean", "none"]
Floats = npt.NDArray[np.float64]
Indices = npt.NDArray[np.int64]

MIN_POINTS, MAX_POINTS = 2, 100_000  # what a request may ask a series to be downsampled to
WIDE_BUCKET_POINTS = 48  # from this width on, one bucket's areas are computed with numpy


def downsample(
    x: Floats, y: Floats, max_points: int, method: Method, along: Floats
) -> tuple[Floats, Floats, Floats]:
    """The kept (x, y, along) points."""
    if method == "none" or len(x) <= max_points:
        return x, y, along
    if method == "lttb":
        keep = lttb_indices(x, y, max_points)
        return x[keep], y[keep], along[keep]
    if method == "minmax":
        keep = minmax_indices(y, max_points)
        return x[keep], y[keep], along[keep]
    return bucket_means(x, y, along, max_points)


def bucket_edges(n: int, count: int) -> npt.NDArray[np.int64]:
    """Start indices of ``count`` near-equal buckets over ``n`` points, plus ``n``; empty ones dropped."""
    edges = np.linspace(0, n, count + 1).astype(np.int64)
    return np.unique(edges)


def lttb_indices(x: Floats, y: Floats, max_points: int) -> Indices:
    """Largest-Triangle-Three-Buckets (Steinarsson 2013): first, last, and per bucket the point that
    spans the largest triangle with the previous kept point and the next bucket's mean."""
    n = len(x)
    if max_points < 3:
        return np.array([0, n - 1][:max_points], dtype=np.int64)
    edges = 1 + bucket_edges(n - 2, max_points - 2)  # inner points 1..n-2
    starts, stops = edges[:-1], edges[1:]
    # the next bucket's mean for every bucket; the last bucket looks at the last point
    sizes = (stops - starts).astype(np.float64)
    next_x = np.append((np.add.reduceat(x[: stops[-1]], starts) / sizes)[1:], x[n - 1])
    next_y = np.append((np.add.reduceat(y[: stops[-1]], starts) / sizes)[1:], y[n - 1])
    xs, ys = x.tolist(), y.tolist()
    kept = [0]
    ax, ay = xs[0], ys[0]
    buckets = zip(starts.tolist(), stops.tolist(), next_x.tolist(), next_y.tolist(), strict=True)
    for start, stop, nx, ny in buckets:
        # twice the triangle (a, b, next mean) = |(ax - nx)(by - ay) - (ax - bx)(ny - ay)|
        #                                      = |by·(ax - nx) + bx·(ny - ay) + (nx·ay - ax·ny)|
        cy, cx, c0 = ax - nx, ny - ay, nx * ay - ax * ny
        if stop - start >= WIDE_BUCKET_POINTS:
            area = np.abs(y[start:stop] * cy + x[start:stop] * cx + c0)
            best = start + int(np.argmax(area))
        else:
            best, best_area = start, -1.0
            for j in range(start, stop):
                a = abs(ys[j] * cy + xs[j] * cx + c0)
                if a > best_area:
                    best, best_area = j, a
        kept.append(best)
        ax, ay = xs[best], ys[best]
    kept.append(n - 1)
    return np.array(kept, dtype=np.int64)


def minmax_indices(y: Floats, max_points: int) -> Indices:
    """Per bucket the smallest and the largest point (extremes survive), in x order."""
    edges = bucket_edges(len(y), max(1, max_points // 2))
    starts = edges[:-1]
    width = int(np.max(np.diff(edges)))
    # a (buckets x width) view padded with NaN; nanargmin/nanargmax skip the padding
    padded = np.full((len(starts), width), np.nan)
    offsets = np.arange(len(y)) - np.repeat(starts, np.diff(edges))
    padded[np.repeat(np.arange(len(starts)), np.diff(edges)), offsets] = y
    lo = starts + np.nanargmin(padded, axis=1)
    hi = starts + np.nanargmax(padded, axis=1)
    pairs = np.stack([np.minimum(lo, hi), np.maximum(lo, hi)], axis=1).ravel()
    keep: Indices = pairs[np.append(True, pairs[1:] != pairs[:-1])].astype(np.int64)  # lo == hi: once
    return keep


def bucket_means(x: Floats, y: Floats, along: Floats, max_points: int) -> tuple[Floats, Floats, Floats]:
    edges = bucket_edges(len(x), max_points)
    starts, sizes = edges[:-1], np.diff(edges).astype(np.float64)
    return tuple(np.add.reduceat(a, starts) / sizes for a in (x, y, along))  # type: ignore[return-value]
