"""DSSDA's segment step: the best δ for fixed M and link model, by exact dynamic programming.

For one cluster (a "row") the segment problem is

    J(δ) = Σ_{k: δ_k>0} c_k(δ_k) + c1·[max(c_F, X, T) + max(c_B, 2X, T)] + c2·max(Γ_f, Γ)
    X = max_{δ_k>0} δ_k·a_k,   T = max_{δ_k>0} t_k,   Γ = max_{δ_k>0} γ_k(δ_k)

with c_k(d) the additive cost of d TEBs on device k (time, queue-weighted energy, and in the priced
link model the bandwidth at price μ), t_k the device's link time per payload and γ_k(d) its gather
time — additive except for three maxima. The DP over (devices, TEBs placed) is exact for the additive
part; the maxima are handled exactly:

- T: devices are processed in decreasing t_k, so the first scheduled device sets T; the DP carries a
  "started" flag and charges the maxima on the transition that starts the schedule.
- X and Γ: thresholds (X̄, Γ̄) from the values d·a_k and γ_k(d) are enumerated; a threshold pair caps
  device k at the largest d with d·a_k ≤ X̄ and γ_k(d) ≤ Γ̄, and the maxima are charged at X̄ and Γ̄.
  Every solution is feasible under its own thresholds, where that charge is exact, so the minimum over
  all pairs is the exact optimum. Pairs are solved in order of a valid lower bound — the LP relaxation
  (each device's cheapest cost per TEB, min_d c_k(d)/d, filled greedily under the caps) plus the maxima
  at the thresholds — and dropped once the bound reaches the best solution found. Values of X̄ (Γ̄) at
  or below the floor of their term (c_F, c_B/2; Γ_f) are merged into the largest one, which dominates.
  With more candidates than ``max_pairs`` allows, the ones nearest the current solution's X and Γ are
  examined (exact within that window).

Memory caps (they depend on M) bound every δ_k; unavailable devices have cap 0.

Cost of the DP: O(rows × pairs × K × L × D) with D the largest cap, in compiled scalar loops
(``kernels.segment_dp``). After the first chunk of pairs only the rows with a pair left above their bound
are solved. Work the DP's answer cannot depend on is skipped: the first device's continuations (nothing
has started before it), continuations beyond a device's cap, pairs whose caps cannot hold L, and a
device updates only the dp[j] from which the devices after it can still reach j = L (the last one only
dp[L]). The caps and bounds of the pairs are compiled too (``kernels.pair_bounds``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler import kernels
from collapipe_core.scheduler.problem import IntArray, quiet, take_last

_INF = np.inf
FIRST_CHUNK = 4


@dataclass(frozen=True, eq=False)
class SegmentCosts:
    """Per row the data of J(δ): (R, K, L) arrays indexed by d − 1, (R, K) per device, (R,) per row."""

    cost: FloatArray  # c_k(d)
    gather_s: FloatArray  # γ_k(d)
    caps: IntArray  # memory cap (0 = cannot be scheduled)
    compute_s: FloatArray  # a_k
    link_s: FloatArray  # t_k
    c1: FloatArray
    c2: FloatArray
    stage_f: FloatArray
    stage_b: FloatArray
    gather_floor: FloatArray
    constant: FloatArray  # (R,) added to every placement's cost


def segment_cost(sc: SegmentCosts, delta: IntArray) -> FloatArray:
    """J(δ) for δ (R, K) (ignoring memory caps)."""
    on = delta > 0
    idx = np.clip(delta - 1, 0, sc.cost.shape[2] - 1)[:, :, None]
    add = np.sum(np.where(on, take_last(sc.cost, idx)[:, :, 0], 0.0), axis=1)
    gam = np.max(np.where(on, take_last(sc.gather_s, idx)[:, :, 0], 0.0), axis=1)
    x = np.max(np.where(on, delta * sc.compute_s, 0.0), axis=1)
    t = np.max(np.where(on, sc.link_s, 0.0), axis=1)
    maxima = _maxima(sc.c1, sc.c2, sc.stage_f, sc.stage_b, sc.gather_floor, x, t, gam)
    return np.asarray(add + sc.constant + maxima, dtype=np.float64)


def _maxima(
    c1: FloatArray,
    c2: FloatArray,
    sf: FloatArray,
    sb: FloatArray,
    floor: FloatArray,
    x: FloatArray,
    t: FloatArray,
    g: FloatArray,
) -> FloatArray:
    stages = np.maximum(np.maximum(sf, x), t) + np.maximum(np.maximum(sb, 2 * x), t)
    return np.asarray(c1 * stages + c2 * np.maximum(floor, g), dtype=np.float64)


@quiet
def best_segments(
    sc: SegmentCosts, num_blocks: int, current: IntArray, max_pairs: int = 4096, budget: int = 2_000_000
) -> tuple[IntArray, FloatArray]:
    """The δ (R, K) minimising J and its cost (R,); ``current`` seeds the bound if it fits the caps.

    Rows whose caps cannot hold the L TEBs get cost ∞ (and ``current`` back). ``budget`` bounds the
    elements of one batched DP step (pairs are solved in chunks).
    """
    rows, _k = sc.compute_s.shape
    L = num_blocks
    xs, gs = _threshold_candidates(sc, L, current, max_pairs)
    px, pg = xs.shape[1], gs.shape[1]
    xb = np.repeat(xs, pg, axis=1)  # (R, P) pair grid
    gb = np.tile(gs, (1, px))
    row_terms = _row_terms(sc)
    # (R, P, K) caps under each pair, (R, P) LP lower bound plus the maxima at the thresholds
    caps, lower = kernels.pair_bounds(
        sc.cost, sc.gather_s, sc.caps, sc.compute_s, sc.link_s, row_terms, xb, gb, L
    )
    fits = np.all(current <= sc.caps, axis=1) & (current.sum(axis=1) == L)
    best = np.where(fits, segment_cost(sc, current), _INF)
    best_delta = current.copy()
    order = np.argsort(lower, axis=1, kind="stable")
    chunk = int(max(1, min(order.shape[1], budget // max(rows * (L + 1) * L, 1))))
    # a small first chunk finds a good incumbent, which then prunes most pairs
    bounds = [
        0,
        min(chunk, FIRST_CHUNK),
        *range(min(chunk, FIRST_CHUNK) + chunk, order.shape[1] + chunk, chunk),
    ]
    for start, stop in itertools.pairwise(bounds):
        if start >= order.shape[1]:
            break
        idx = order[:, start:stop]
        live = take_last(lower, idx) < best[:, None] * (1 - 1e-12)
        if not np.any(live):
            break
        sel_caps = np.where(live[:, :, None], caps[np.arange(rows)[:, None], idx], 0)
        sel_x, sel_g = take_last(xb, idx), take_last(gb, idx)
        busy = np.any(live, axis=1)
        if np.all(busy):
            delta, cost = kernels.segment_dp(sc.cost, sc.link_s, row_terms, sel_caps, sel_x, sel_g, L)
        else:  # the DP only for the rows with a pair left to examine (the others are pruned)
            on = np.flatnonzero(busy)
            part_delta, part_cost = kernels.segment_dp(
                sc.cost[on], sc.link_s[on], row_terms[:, on], sel_caps[on], sel_x[on], sel_g[on], L
            )
            delta = np.zeros((*sel_caps.shape[:2], sel_caps.shape[2]), dtype=np.int64)
            cost = np.full(sel_caps.shape[:2], _INF)
            delta[on], cost[on] = part_delta, part_cost
        cost = np.where(live, cost, _INF)
        i = np.argmin(cost, axis=1)
        c = cost[np.arange(rows), i]
        better = c < best
        best = np.where(better, c, best)
        best_delta = np.where(better[:, None], delta[np.arange(rows), i], best_delta)
    feasible = np.all(best_delta <= sc.caps, axis=1) & (best_delta.sum(axis=1) == L)
    # the charge at the thresholds bounds the solution's cost from above; report its exact cost
    return best_delta, np.where(feasible, segment_cost(sc, best_delta), _INF)


def _threshold_candidates(
    sc: SegmentCosts, L: int, current: IntArray, max_pairs: int
) -> tuple[FloatArray, FloatArray]:
    rows = sc.compute_s.shape[0]
    d = np.arange(1, L + 1, dtype=np.float64)
    ok = d[None, None, :] <= sc.caps[:, :, None]
    xv = np.where(ok, sc.compute_s[:, :, None] * d, _INF).reshape(rows, -1)
    xv = np.where((sc.c1 > 0)[:, None], xv, _INF)  # no stage term: X̄ only caps, ∞ is exact
    gv = np.where(ok & (sc.c2 > 0)[:, None, None], sc.gather_s, _INF).reshape(rows, -1)
    # X̄ only matters above max(c_F, T) and max(c_B, T)/2, and T is at least the fastest link
    t_low = np.min(np.where(sc.caps > 0, sc.link_s, _INF), axis=1)
    xv = _floor_and_sort(xv, np.minimum(np.maximum(sc.stage_f, t_low), 0.5 * np.maximum(sc.stage_b, t_low)))
    gv = _floor_and_sort(gv, sc.gather_floor)
    on = current > 0
    idx = np.clip(current - 1, 0, L - 1)[:, :, None]
    x_now = np.max(np.where(on, current * sc.compute_s, 0.0), axis=1)
    g_now = np.max(np.where(on, take_last(sc.gather_s, idx)[:, :, 0], 0.0), axis=1)
    width = max(int(np.sqrt(max_pairs)), 2)
    return _window(xv, x_now, width), _window(gv, g_now, width)


def _floor_and_sort(values: FloatArray, floor: FloatArray) -> FloatArray:
    """Sorted thresholds per row; values at or below the term's floor collapse onto the largest one."""
    v = np.sort(values, axis=1)
    below = v <= floor[:, None]
    top_below = np.max(np.where(below, v, -_INF), axis=1, keepdims=True)
    v = np.sort(np.where(below & (v < top_below), _INF, v), axis=1)
    finite = np.isfinite(v)
    last = np.max(np.where(finite, v, -_INF), axis=1, keepdims=True)
    v = np.where(finite, v, np.where(np.isfinite(last), last, _INF))
    return v[:, : max(int(np.max(finite.sum(axis=1))), 1)]


def _window(values: FloatArray, now: FloatArray, width: int) -> FloatArray:
    if values.shape[1] <= width:
        return values
    pos = np.argmin(np.abs(values - now[:, None]), axis=1)
    start = np.clip(pos - width // 2, 0, values.shape[1] - width)
    return take_last(values, start[:, None] + np.arange(width)[None, :])


def _row_terms(sc: SegmentCosts) -> FloatArray:
    """(6, R): c1, c2, c_F, c_B, Γ_f and the constant of each row."""
    return np.stack([sc.c1, sc.c2, sc.stage_f, sc.stage_b, sc.gather_floor, sc.constant])
