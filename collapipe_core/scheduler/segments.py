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

Cost of the DP: O(rows × pairs × K × L × D) with D the largest cap. After the first chunk of pairs
only the rows with a pair left above their bound are solved, and the transition min_d dp[j − d] + c(d)
reads the table through a strided window (no gather of an (L + 1) × D index), so large rounds with
many TEBs stay within the decision-time goals (docs/scheduler.md). Work the DP's answer cannot depend on
is skipped: the first device's continuations (nothing has started before it), each device's window is
only as wide as its largest cap, and a device updates only the dp[j] from which the devices after it
can still reach j = L (the last one only dp[L]).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from collapipe_core.network import FloatArray
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
    caps = _pair_caps(sc, xb, gb, L)  # (R, P, K)
    lower = _lower_bound(sc, caps, xb, gb, L)
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
            delta, cost = _dp(sc, sel_caps, sel_x, sel_g, L)
        else:  # the DP only for the rows with a pair left to examine (the others are pruned)
            on = np.flatnonzero(busy)
            part_delta, part_cost = _dp(_take_rows(sc, on), sel_caps[on], sel_x[on], sel_g[on], L)
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


def _take_rows(sc: SegmentCosts, rows: IntArray) -> SegmentCosts:
    return SegmentCosts(*(getattr(sc, f)[rows] for f in SegmentCosts.__dataclass_fields__))


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


def _pair_caps(sc: SegmentCosts, xb: FloatArray, gb: FloatArray, L: int) -> IntArray:
    """Largest d per (row, pair, device) with d·a_k ≤ X̄, γ_k(d) ≤ Γ̄ and d ≤ memory cap."""
    d = np.arange(1, L + 1)
    tol = 1 + 1e-12
    ok_x = (d * sc.compute_s[:, None, :, None] <= xb[:, :, None, None] * tol) | ~np.isfinite(xb)[
        :, :, None, None
    ]
    ok_g = (sc.gather_s[:, None, :, :] <= gb[:, :, None, None] * tol) | ~np.isfinite(gb)[:, :, None, None]
    ok = ok_x & ok_g & (d <= sc.caps[:, None, :, None])
    # γ_k(d) and d·a_k grow with d: the allowed d form a prefix
    return np.asarray(np.sum(np.cumprod(ok, axis=3), axis=3), dtype=np.int64)


def _lower_bound(sc: SegmentCosts, caps: IntArray, xb: FloatArray, gb: FloatArray, L: int) -> FloatArray:
    """LP relaxation (cheapest cost per TEB within the caps, filled greedily) plus the maxima."""
    d = np.arange(1, L + 1)
    per = sc.cost / d  # (R, K, L)
    allowed = d[None, None, None, :] <= caps[:, :, :, None]  # (R, P, K, L)
    rate = np.min(np.where(allowed, per[:, None], _INF), axis=3)  # (R, P, K)
    order = np.argsort(rate, axis=2)
    r_s = take_last(rate, order)
    c_s = take_last(caps, order).astype(np.float64)
    before = np.cumsum(c_s, axis=2) - c_s
    take = np.clip(L - before, 0, c_s)
    lp = np.sum(np.where(take > 0, r_s * take, 0.0), axis=2)
    lp = np.where(caps.sum(axis=2) >= L, lp, _INF)
    t_low = np.min(np.where(caps > 0, sc.link_s[:, None, :], _INF), axis=2)
    xx = np.where(np.isfinite(xb), xb, 0.0)
    gg = np.where(np.isfinite(gb), gb, 0.0)
    cols = (
        sc.c1[:, None],
        sc.c2[:, None],
        sc.stage_f[:, None],
        sc.stage_b[:, None],
        sc.gather_floor[:, None],
    )
    return lp + sc.constant[:, None] + _maxima(*cols, xx, t_low, gg)


def _dp(
    sc: SegmentCosts, caps: IntArray, xb: FloatArray, gb: FloatArray, L: int
) -> tuple[IntArray, FloatArray]:
    """Exact DP for every (row, pair) at once: δ (R, C, K) and the cost charged at the thresholds."""
    rows, pairs, k = caps.shape
    order = np.argsort(-sc.link_s, axis=1, kind="stable")  # decreasing link time
    xx = np.where(np.isfinite(xb), xb, 0.0)
    gg = np.where(np.isfinite(gb), gb, 0.0)
    j = np.arange(L + 1)
    d = np.arange(1, max(int(caps.max()), 1) + 1)  # no device takes more than the largest cap
    pad = np.full((rows, pairs, L), _INF)  # dp padded with L infeasible entries: index j − d + L
    r_idx, p_idx = np.arange(rows)[:, None], np.arange(pairs)[None, :]
    dp = np.full((rows, pairs, L + 1), _INF)  # schedule started; "not started" is only j = 0
    choice = np.zeros((k, rows, pairs, L + 1), dtype=np.int64)
    started = np.zeros((k, rows, pairs, L + 1), dtype=bool)
    # per device in DP order (elementwise, so the same numbers as one device at a time): caps (R, C, K),
    # costs (R, K, L) and the maxima charged when the schedule starts on the device (R, C, K)
    caps_o = take_last(caps, np.broadcast_to(order[:, None, :], caps.shape))
    cost_o = sc.cost[np.arange(rows)[:, None], order]
    cols = (
        sc.c1[:, None, None],
        sc.c2[:, None, None],
        sc.stage_f[:, None, None],
        sc.stage_b[:, None, None],
        sc.gather_floor[:, None, None],
    )
    t_o = take_last(sc.link_s, order)[:, None, :]
    start_all = _maxima(*cols, xx[:, :, None], t_o, gg[:, :, None])
    # TEBs the devices after each step can still take (the largest over rows and pairs): at step s only
    # dp[j] with j ≥ L − that can lead to a full placement, so the others are not updated (they are read
    # only where the cost of d TEBs is ∞, and backtracking from j = L never reaches them)
    later = np.cumsum(caps_o[:, :, ::-1], axis=2)[:, :, ::-1] - caps_o  # (R, C, K)
    lowest = [max(0, L - int(later[:, :, step].max())) for step in range(k)]
    for step in range(k):
        lo = lowest[step]
        cap = caps_o[:, :, step]  # (R, C)
        start_cost = start_all[:, :, step]  # (R, C)
        width = int(cap.max())  # D of this device: above its largest cap every continuation is ∞
        old = dp[:, :, lo:]
        if step == 0 or width == 0:  # nothing started yet (dp all ∞) or no TEB fits: no continuation
            best_c = np.full(old.shape, _INF)
            best_d = np.zeros(old.shape, dtype=np.int64)
        else:
            # (R, C, 1, D) cost of d TEBs on the device, ∞ above its cap
            cost_d = np.where(d[:width] <= cap[:, :, None], cost_o[:, step][:, None, :width], _INF)
            padded = np.concatenate([pad, dp], axis=2)
            # (R, C, L+1−lo, D): dp[j − d] + cost of d TEBs, ∞ where j < d — a read-only strided view of
            # the padded table (entry [j, i] is padded[L − D + j + i]), reversed so that d = 1 comes first
            s0, s1, s2 = padded.strides
            windows = as_strided(
                padded[:, :, L - width + lo :],
                (rows, pairs, L + 1 - lo, width),
                (s0, s1, s2, s2),
                writeable=False,
            )
            cont = windows[:, :, :, ::-1] + cost_d[:, :, None, :]
            best_d = np.argmin(cont, axis=3)
            best_c = take_last(cont, best_d[..., None])[..., 0]
        first = np.concatenate([np.full((rows, 1), _INF), cost_o[:, step]], axis=1)[:, lo:]  # j TEBs
        jj = j[None, None, lo:]
        can_start = (jj >= 1) & (jj <= cap[:, :, None])
        start = np.where(can_start, first[:, None, :] + start_cost[:, :, None], _INF)
        new = np.minimum(old, np.minimum(best_c, start))
        improved = new < old
        choice[step, :, :, lo:] = np.where(improved, np.where(best_c <= start, best_d + 1, jj), 0)
        started[step, :, :, lo:] = improved & (start < best_c)
        dp[:, :, lo:] = new
    delta = np.zeros((rows, pairs, k), dtype=np.int64)
    left = np.full((rows, pairs), L)
    done = np.zeros((rows, pairs), dtype=bool)
    for step in range(k - 1, -1, -1):
        dev = order[:, step]
        take = np.where(done, 0, choice[step, r_idx, p_idx, left])
        delta[r_idx, p_idx, dev[:, None]] = take
        done |= started[step, r_idx, p_idx, left] & ~done
        left = left - take
    cost = dp[:, :, L] + sc.constant[:, None]
    return delta, np.where(np.isfinite(cost) & (left == 0), cost, _INF)
