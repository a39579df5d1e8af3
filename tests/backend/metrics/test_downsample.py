"""Downsampling keeps the shape (LTTB), the extremes (minmax) or bucket means, within max_points."""

from __future__ import annotations

import itertools

import numpy as np

from backend.metrics.downsample import downsample, lttb_indices, minmax_indices


def test_short_series_are_returned_unchanged() -> None:
    x, y = np.arange(5.0), np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    for method in ("lttb", "minmax", "mean", "none"):
        kx, ky, kz = downsample(x, y, 10, method, x * 3)
        assert kx.tolist() == x.tolist() and ky.tolist() == y.tolist() and kz.tolist() == (x * 3).tolist()


def test_lttb_keeps_the_ends_and_a_spike() -> None:
    x = np.arange(1000.0)
    y = np.sin(x / 50.0)
    y[537] = 40.0
    keep = lttb_indices(x, y, 50)
    assert len(keep) == 50 and keep[0] == 0 and keep[-1] == 999 and 537 in keep
    assert np.all(np.diff(keep) > 0)


def test_the_companion_is_kept_at_the_points_kept() -> None:
    rng = np.random.default_rng(1)
    x = np.arange(2000.0)
    y = np.cumsum(rng.normal(size=2000))
    elapsed = np.cumsum(rng.uniform(1.0, 9.0, size=2000))
    for method in ("lttb", "minmax"):
        kx, _, kz = downsample(x, y, 100, method, elapsed)
        assert kz.tolist() == elapsed[kx.astype(int)].tolist(), method


def test_minmax_keeps_the_global_extremes() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(size=10_000)
    keep = minmax_indices(y, 100)
    assert len(keep) <= 100 and int(np.argmin(y)) in keep and int(np.argmax(y)) in keep


def test_mean_buckets_average() -> None:
    x, y = np.arange(10.0), np.arange(10.0) * 2
    kx, ky, kz = downsample(x, y, 5, "mean", np.cumsum(x))
    assert kx.tolist() == [0.5, 2.5, 4.5, 6.5, 8.5] and ky.tolist() == [1.0, 5.0, 9.0, 13.0, 17.0]
    assert kz.tolist() == [0.5, 4.5, 12.5, 24.5, 40.5]  # the bucket means of the companion too


def _reference_lttb(x: np.ndarray, y: np.ndarray, max_points: int) -> list[int]:
    """LTTB written out point by point, as in Steinarsson's thesis (the oracle for the fast one)."""
    n = len(x)
    edges = np.linspace(0, n - 2, max_points - 1).astype(int)
    buckets = [(1 + a, 1 + b) for a, b in itertools.pairwise(edges) if b > a]
    kept = [0]
    for i, (start, stop) in enumerate(buckets):
        a = kept[-1]
        if i + 1 < len(buckets):
            ns, ne = buckets[i + 1]
            nx, ny = float(np.mean(x[ns:ne])), float(np.mean(y[ns:ne]))
        else:
            nx, ny = x[n - 1], y[n - 1]
        areas = [abs((x[a] - nx) * (y[j] - y[a]) - (x[a] - x[j]) * (ny - y[a])) for j in range(start, stop)]
        kept.append(start + int(np.argmax(areas)))
    return [*kept, n - 1]


def test_lttb_picks_the_same_points_as_the_point_by_point_algorithm() -> None:
    rng = np.random.default_rng(7)
    # narrow buckets (scanned with floats) and wide ones (scanned with numpy), uneven splits
    for n, max_points in ((1000, 500), (1000, 37), (20_000, 300), (5003, 4000), (10, 3)):
        x = np.cumsum(rng.uniform(0.5, 1.5, size=n))
        y = np.cumsum(rng.normal(size=n))
        assert lttb_indices(x, y, max_points).tolist() == _reference_lttb(x, y, max_points), (n, max_points)


def test_minmax_and_mean_agree_with_per_bucket_loops() -> None:
    rng = np.random.default_rng(3)
    x, y = np.arange(1003.0), rng.normal(size=1003)
    edges = np.linspace(0, 1003, 51).astype(int)
    expected: list[int] = []
    for a, b in itertools.pairwise(edges):
        expected.extend(sorted({a + int(np.argmin(y[a:b])), a + int(np.argmax(y[a:b]))}))
    assert minmax_indices(y, 100).tolist() == expected
    kx, ky, _ = downsample(x, y, 50, "mean", x)
    edges = np.linspace(0, 1003, 51).astype(int)
    assert np.allclose(ky, [y[a:b].mean() for a, b in itertools.pairwise(edges)])
    assert np.allclose(kx, [x[a:b].mean() for a, b in itertools.pairwise(edges)])
