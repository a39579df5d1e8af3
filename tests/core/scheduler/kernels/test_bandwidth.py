"""The compiled bandwidth step against a grid over the bandwidth simplex."""

from __future__ import annotations

import numpy as np

from collapipe_core.scheduler.kernels import bandwidth_rows


def _latency(beta: np.ndarray, delta: np.ndarray, c: np.ndarray, d: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Lat at bandwidth shares beta (..., K): u_k = 1/(c_k + d_k·β_k) over the scheduled devices."""
    a, c1, c2, stage_f, stage_b, floor, p_bits, b_bits = t
    on = delta > 0
    with np.errstate(divide="ignore"):
        u = np.where(on, 1.0 / (c + d * beta), 0.0)
    link = p_bits * u.max(axis=-1)
    gather = b_bits * (delta * u).max(axis=-1)
    return np.asarray(
        a * u.sum(axis=-1)
        + c1 * (np.maximum(stage_f, link) + np.maximum(stage_b, link))
        + c2 * np.maximum(floor, gather)
    )


def test_bandwidth_rows_find_the_least_latency_on_the_simplex() -> None:
    rng = np.random.default_rng(3)
    grid = np.linspace(0.0, 1.0, 401)
    simplex = np.array([(x, y, max(1.0 - x - y, 0.0)) for x in grid for y in grid if x + y <= 1.0 + 1e-12])
    simplex[simplex < 1e-12] = 0.0
    for trial in range(60):
        delta = rng.integers(1, 7, 3)
        if trial % 4 < 3:  # most rows leave a device out
            delta[trial % 4] = 0
        c = np.zeros(3)  # links at a fixed SNR: the model where the step is exact
        d = rng.uniform(0.5, 5, 3)
        p_bits, b_bits = rng.uniform(0.5, 2), rng.uniform(0.5, 2)
        a, c1, c2 = rng.uniform(0.1, 2), rng.uniform(0, 3), rng.uniform(0, 3)
        stage_f, stage_b, floor = rng.uniform(0, 1), rng.uniform(0, 2), rng.uniform(0, 1) * (trial % 3 == 0)
        terms = np.array([[a], [c1], [c2], [stage_f], [stage_b], [floor]])
        beta, bracket = bandwidth_rows(delta[None], c[None], d[None], terms, p_bits, b_bits)
        t = (a, c1, c2, stage_f, stage_b, floor, p_bits, b_bits)
        on = delta > 0
        shares = simplex[np.all(simplex[:, ~on] == 0.0, axis=1)]  # unscheduled devices get nothing
        lat_grid = _latency(shares, delta, c, d, t)
        lat = float(_latency(beta[0], delta, c, d, t))
        assert np.all(beta[0][~on] == 0.0) and np.all(beta[0][on] > 0.0)
        assert beta[0].sum() <= 1.0 + 1e-12
        assert lat <= lat_grid.min() * (1 + 1e-9)
        assert lat >= lat_grid.min() * (1 - 1e-2)  # the grid comes close to the optimum
        assert 0.0 <= bracket[0, 0] <= bracket[0, 1]
