"""Downsampling keeps the shape (LTTB), the extremes (minmax) or bucket means, within max_points."""

from __future__ import annotations

import numpy as np

from backend.metrics.downsample import downsample, lttb_indices, minmax_indices


def test_short_series_are_returned_unchanged() -> None:
    x, y = np.arange(5.0), np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    for method in ("lttb", "minmax", "mean", "none"):
        kx, ky = downsample(x, y, 10, method)
        assert kx.tolist() == x.tolist() and ky.tolist() == y.tolist()


def test_lttb_keeps_the_ends_and_a_spike() -> None:
    x = np.arange(1000.0)
    y = np.sin(x / 50.0)
    y[537] = 40.0
    keep = lttb_indices(x, y, 50)
    assert len(keep) == 50 and keep[0] == 0 and keep[-1] == 999 and 537 in keep
    assert np.all(np.diff(keep) > 0)


def test_minmax_keeps_the_global_extremes() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(size=10_000)
    keep = minmax_indices(y, 100)
    assert len(keep) <= 100 and int(np.argmin(y)) in keep and int(np.argmax(y)) in keep


def test_mean_buckets_average() -> None:
    x, y = np.arange(10.0), np.arange(10.0) * 2
    kx, ky = downsample(x, y, 5, "mean")
    assert kx.tolist() == [0.5, 2.5, 4.5, 6.5, 8.5] and ky.tolist() == [1.0, 5.0, 9.0, 13.0, 17.0]
