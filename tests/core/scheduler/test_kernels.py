"""The compiled kernels against independent computations: a grid over the bandwidth simplex, brute force
over every composition for the segment DP, the caps' definition and the DP itself for the pair bounds."""

from __future__ import annotations

import itertools

import numpy as np

from collapipe_core.scheduler.kernels import bandwidth_rows, pair_bounds, segment_dp


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


def test_segment_dp_matches_brute_force_over_every_composition() -> None:
    rng = np.random.default_rng(11)
    for k, L in ((2, 5), (3, 4), (4, 6)):
        rows, pairs = 6, 5
        cost = rng.uniform(0, 1, (rows, k, 1)) + rng.uniform(0, 0.5, (rows, k, L)).cumsum(axis=2)
        link_s = rng.uniform(0.01, 1.0, (rows, k))
        high = np.array([3.0, 3.0, 0.5, 1.0, 1.0, 1.0])  # c1, c2, c_F, c_B, Γ_f, constant
        terms = rng.uniform(0, 1, (6, rows)) * high[:, None]
        caps = rng.integers(0, L + 1, (rows, pairs, k))
        x_bar = np.where(rng.random((rows, pairs)) < 0.3, np.inf, rng.uniform(0, 2, (rows, pairs)))
        g_bar = np.where(rng.random((rows, pairs)) < 0.3, np.inf, rng.uniform(0, 2, (rows, pairs)))
        delta, charged = segment_dp(cost, link_s, terms, caps, x_bar, g_bar, L)
        comps = [np.array(p) for p in itertools.product(range(L + 1), repeat=k) if sum(p) == L]
        for r, p in itertools.product(range(rows), range(pairs)):
            fits = [dl for dl in comps if np.all(dl <= caps[r, p])]
            if not fits:
                assert charged[r, p] == np.inf
                continue
            charges = [_charge(cost[r], link_s[r], terms[:, r], x_bar[r, p], g_bar[r, p], dl) for dl in fits]
            best = min(charges)
            assert np.isclose(charged[r, p], best, rtol=1e-12, atol=0)
            assert delta[r, p].sum() == L and np.all(delta[r, p] <= caps[r, p])
            mine = _charge(cost[r], link_s[r], terms[:, r], x_bar[r, p], g_bar[r, p], delta[r, p])
            assert np.isclose(mine, best, rtol=1e-12, atol=0)


def _charge(
    cost: np.ndarray, link_s: np.ndarray, terms: np.ndarray, x_bar: float, g_bar: float, delta: np.ndarray
) -> float:
    """J(δ) with the maxima charged at the thresholds X̄, Γ̄ (0 when ∞) and T the slowest scheduled link."""
    c1, c2, stage_f, stage_b, floor, constant = terms
    x = x_bar if np.isfinite(x_bar) else 0.0
    g = g_bar if np.isfinite(g_bar) else 0.0
    on = delta > 0
    slow = link_s[on].max()
    stages = max(stage_f, x, slow) + max(stage_b, 2 * x, slow)
    return float(cost[on, delta[on] - 1].sum() + c1 * stages + c2 * max(floor, g) + constant)


def test_pair_bounds_cap_by_definition_and_bound_the_exact_dp_from_below() -> None:
    rng = np.random.default_rng(7)
    rows, pairs, k, L = 5, 12, 4, 6
    d = np.arange(1, L + 1)
    cost = rng.uniform(0, 1, (rows, k, 1)) + rng.uniform(0, 0.5, (rows, k, L)).cumsum(axis=2)
    gather_s = rng.uniform(0.05, 1.0, (rows, k, 1)) * d
    memory_caps = rng.integers(0, L + 1, (rows, k))
    compute_s, link_s = rng.uniform(0.01, 0.5, (rows, k)), rng.uniform(0.01, 1.0, (rows, k))
    terms = rng.uniform(0, 1, (6, rows)) * np.array([3.0, 3.0, 0.5, 1.0, 1.0, 1.0])[:, None]
    x_bar = np.where(rng.random((rows, pairs)) < 0.2, np.inf, rng.uniform(0, 3, (rows, pairs)))
    g_bar = np.where(rng.random((rows, pairs)) < 0.2, np.inf, rng.uniform(0, 6, (rows, pairs)))
    caps, lower = pair_bounds(cost, gather_s, memory_caps, compute_s, link_s, terms, x_bar, g_bar, L)
    _, charged = segment_dp(cost, link_s, terms, caps, x_bar, g_bar, L)
    for r, p, i in itertools.product(range(rows), range(pairs), range(k)):
        fits = (
            (d <= memory_caps[r, i]) & (d * compute_s[r, i] <= x_bar[r, p]) & (gather_s[r, i] <= g_bar[r, p])
        )
        assert caps[r, p, i] == (d[fits].max() if fits.any() else 0)  # γ and d·a grow with d
    assert np.all(lower <= charged * (1 + 1e-12))
    assert np.all(np.isinf(lower) == np.isinf(charged))  # both ∞ exactly when the caps hold fewer than L
