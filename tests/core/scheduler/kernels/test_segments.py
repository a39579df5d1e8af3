"""The compiled segment step's parts: the DP of a threshold pair against brute force over every
composition, a pair's caps and bound against the caps' definition and the DP itself, the candidate
thresholds against numpy's sort (tests/core/scheduler/test_segments.py checks the whole step)."""

from __future__ import annotations

import itertools

import numpy as np

from collapipe_core.scheduler.kernels import segments
from collapipe_core.scheduler.kernels.scalars import sort_order


def segment_dp(
    cost: np.ndarray,
    link_s: np.ndarray,
    terms: np.ndarray,
    caps: np.ndarray,
    x_bar: np.ndarray,
    g_bar: np.ndarray,
    L: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The DP of every (row, pair) (caps (R, P, K), pairs (R, P)): δ (R, P, K) and the charged costs."""
    rows, pairs, k = caps.shape
    delta = np.zeros((rows, pairs, k), dtype=np.int64)
    charged = np.empty((rows, pairs))
    order, scratch = np.empty(k, dtype=np.int64), segments._dp_scratch(k, L)
    for r in range(rows):
        sort_order(link_s[r], True, order)
        for p in range(pairs):
            charged[r, p] = segments._dp_pair(
                caps[r, p], cost[r], link_s[r], terms[:, r].copy(), x_bar[r, p], g_bar[r, p], L, order,
                scratch, delta[r, p],
            )  # fmt: skip
    return delta, charged


def pair_bounds(
    cost: np.ndarray,
    gather_s: np.ndarray,
    memory_caps: np.ndarray,
    compute_s: np.ndarray,
    link_s: np.ndarray,
    terms: np.ndarray,
    x_bar: np.ndarray,
    g_bar: np.ndarray,
    L: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Every (row, pair)'s device caps (R, P, K) and lower bound (R, P)."""
    rows, pairs = x_bar.shape
    k = compute_s.shape[1]
    caps = np.empty((rows, pairs, k), dtype=np.int64)
    lower = np.empty((rows, pairs))
    scratch = segments._bound_scratch(k, L)
    for r in range(rows):
        segments._row_prefixes(cost[r], gather_s[r], scratch)
        for p in range(pairs):
            lower[r, p] = segments._bound_pair(
                memory_caps[r], compute_s[r], link_s[r], terms[:, r].copy(), x_bar[r, p], g_bar[r, p], L,
                scratch, caps[r, p],
            )  # fmt: skip
    return caps, lower


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


def test_thresholds_come_out_sorted_whether_each_device_s_values_grow_or_not() -> None:
    rng = np.random.default_rng(9)
    for growing in (True, False):
        for _ in range(50):
            k, L = int(rng.integers(1, 6)), int(rng.integers(1, 12))
            runs = rng.uniform(0, 1, (k, L))
            runs = np.cumsum(runs, axis=1) if growing else runs
            lengths = rng.integers(0, L + 1, k)
            out = np.empty(k * L)
            n = segments._sorted_runs(runs, lengths, np.empty(k, dtype=np.int64), out)
            expected = np.sort(np.concatenate([runs[i, : lengths[i]] for i in range(k)]))
            assert n == expected.size and np.array_equal(out[:n], expected)
