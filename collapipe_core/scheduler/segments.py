"""DSSDA's segment step: the best δ of each row (one cluster under a link model) by exact dynamic programming.

For one row the segment problem is

    J(δ) = Σ_{k: δ_k>0} c_k(δ_k) + c1·[max(c_F, X, T) + max(c_B, 2X, T)] + c2·max(Γ_f, Γ) + c3·Γ + constant
    X = max_{δ_k>0} δ_k·a_k,   T = max_{δ_k>0} t_k,   Γ = max_{δ_k>0} γ_k(δ_k)

over Σ_k δ_k = L, 0 ≤ δ_k ≤ cap_k (memory; 0 for unavailable devices), the segments contiguous in device
order with δ_k = 0 allowed. c_k(d) is the additive cost of d TEBs on device k, t_k its link time per
payload and γ_k(d) its gather time, all given by a link model
(:mod:`~collapipe_core.scheduler.segment_costs`).
The DP over (devices, TEBs placed) is exact for the additive part; the three maxima are made exact:

- T: devices are taken in decreasing t_k, so the first scheduled device sets T; the DP carries whether
  the schedule has started and charges the maxima on the transition that starts it;
- X and Γ: thresholds (X̄, Γ̄) are enumerated from the values d·a_k and γ_k(d) (d ≤ cap_k); a pair caps
  device k at the largest d with d·a_k ≤ X̄ and γ_k(d') ≤ Γ̄ for all d' ≤ d, and charges the maxima at X̄
  and Γ̄. Every solution is feasible under its own thresholds, where the charge is exact, so the minimum
  over all pairs is the optimum. Values at or below a term's floor (X̄ ≤ min(max(c_F, T_min),
  max(c_B, T_min)/2); Γ̄ ≤ Γ_f where c3 = 0) charge the floor and are merged into the largest of them.

Pairs are solved in increasing order of a valid lower bound — the LP relaxation (each device's least cost
per TEB within its cap, min_{d ≤ cap} c_k(d)/d, filled greedily) plus the maxima at the thresholds — and a
pair whose bound reaches the best solution found is not solved. At most ``width`` thresholds of each kind
are examined per row, those nearest the current solution's X and Γ (exact within that window; every
threshold when there are no more than ``width``).

With dp_s[j] the least cost of j TEBs on the first s devices with the schedule started:

    dp_s[j] = min(dp_{s−1}[j],  min_{1 ≤ d ≤ cap_s} dp_{s−1}[j − d] + c_s(d),  c_s(j) + S_s)   (j ≤ cap_s)

where S_s = c1·[max(c_F, X̄, t_s) + max(c_B, 2X̄, t_s)] + c2·max(Γ_f, Γ̄) + c3·Γ̄ charges the maxima when device s
starts the schedule. Work: O(rows × pairs × K × L × D), D the largest cap, each device step D array
operations (one per segment size) over every (row, pair) of a batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.arrays import IntArray, take_last

TOLERANCE = 1e-12  # relative slack of a threshold test and of the bound's pruning


@dataclass(frozen=True, eq=False)
class SegmentCosts:
    """Per row the data of J(δ): (R, K, L) arrays indexed by d − 1, (R, K) per device, (R,) per row."""

    cost: FloatArray  # c_k(d)
    gather_s: FloatArray  # γ_k(d), non-decreasing in d
    caps: IntArray  # memory cap (0 = cannot be scheduled)
    compute_s: FloatArray  # a_k
    link_s: FloatArray  # t_k
    backward_ratio: FloatArray  # ρ: a TEB's backward time over its forward time
    c1: FloatArray
    c2: FloatArray
    c3: FloatArray  # weight of Γ alone: the redistribution's download, w·V (the gather's own weight is c2)
    stage_f: FloatArray
    stage_b: FloatArray
    gather_floor: FloatArray
    constant: FloatArray  # added to every placement's cost


def segment_cost(sc: SegmentCosts, delta: IntArray) -> FloatArray:
    """J(δ) for δ (R, K) (memory caps not checked)."""
    on = delta > 0
    index = np.clip(delta - 1, 0, sc.cost.shape[2] - 1)[:, :, None]
    additive = np.sum(np.where(on, take_last(sc.cost, index)[:, :, 0], 0.0), axis=1)
    gather = np.max(np.where(on, take_last(sc.gather_s, index)[:, :, 0], 0.0), axis=1)
    x = np.max(np.where(on, delta * sc.compute_s, 0.0), axis=1)
    t = np.max(np.where(on, sc.link_s, 0.0), axis=1)
    value: FloatArray = additive + sc.constant + _maxima(sc, np.arange(delta.shape[0]), x, t, gather)
    return value


def _maxima(sc: SegmentCosts, rows: IntArray, x: FloatArray, t: FloatArray, gather: FloatArray) -> FloatArray:
    """c1·[max(c_F, X, T) + max(c_B, 2X, T)] + c2·max(Γ_f, Γ) + c3·Γ of the given rows (x, t, gather broadcast
    against ``rows``' shape)."""
    forward = np.maximum(sc.stage_f[rows], x)
    backward = np.maximum(sc.stage_b[rows], sc.backward_ratio[rows] * x)
    stages = np.maximum(forward, t) + np.maximum(backward, t)
    gathers = sc.c2[rows] * np.maximum(sc.gather_floor[rows], gather) + sc.c3[rows] * gather
    value: FloatArray = sc.c1[rows] * stages + gathers
    return value


def best_segments(
    sc: SegmentCosts, num_blocks: int, current: IntArray, width: int = 32
) -> tuple[IntArray, FloatArray]:
    """The δ (R, K) minimising J and its cost (R,); ``current`` (R, K) is the incumbent where it fits.

    Rows whose caps cannot hold L TEBs get cost ∞ (and ``current`` back)."""
    rows, _k = sc.caps.shape
    L = num_blocks
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        caps = np.minimum(sc.caps, L)
        xs, x_caps, gs, g_caps = _thresholds(sc, caps, current, L, width)  # (R, X), (R, X, K), (R, G), ...
        per_block = np.minimum.accumulate(sc.cost / np.arange(1, L + 1), axis=2)  # min_{d' ≤ d} c(d')/d'
        # a first bound per pair from each threshold alone (the LP only rises when the other caps too)
        lp = np.maximum(
            _relaxation(per_block, x_caps, L)[:, :, None], _relaxation(per_block, g_caps, L)[:, None, :]
        )
        t_low = np.min(np.where(caps > 0, sc.link_s, np.inf), axis=1)
        x, g = np.where(np.isinf(xs), 0.0, xs), np.where(np.isinf(gs), 0.0, gs)
        at = np.arange(rows)[:, None, None]
        lower = (
            lp
            + sc.constant[:, None, None]
            + _maxima(sc, at, x[:, :, None], t_low[:, None, None], g[:, None, :])
        )
        lower = np.where(np.isnan(lower), np.inf, lower).reshape(rows, -1)
        fits = np.all(current <= caps, axis=1) & (current.sum(axis=1) == L)
        best = np.where(fits, segment_cost(sc, current), np.inf)
        delta = current.copy()
        order = np.argsort(lower, axis=1, kind="stable")
        lower = take_last(lower, order)
        link_order = np.argsort(-sc.link_s, axis=1, kind="stable")  # decreasing t_k: the first one sets T
        column, chunk = 0, 1
        while column < order.shape[1]:  # the pairs in bound order, a few columns at a time
            row, col = np.nonzero(lower[:, column : column + chunk] < best[:, None] * (1 - TOLERANCE))
            if row.size == 0:
                break
            ix, ig = np.divmod(order[row, column + col], gs.shape[1])
            pair_caps = np.minimum(np.minimum(x_caps[row, ix], g_caps[row, ig]), caps[row])
            # the pair's own bound: the LP under both caps, T at least the fastest link left
            fastest = np.min(np.where(pair_caps > 0, sc.link_s[row], np.inf), axis=1)
            bound = _relaxation(per_block[row], pair_caps[:, None], L)[:, 0] + sc.constant[row]
            bound = bound + _maxima(sc, row, x[row, ix], fastest, g[row, ig])
            keep = bound < best[row] * (1 - TOLERANCE)
            row, ix, ig, pair_caps = row[keep], ix[keep], ig[keep], pair_caps[keep]
            column, chunk = column + chunk, min(2 * chunk, 8)
            if row.size == 0:
                continue
            trial, value = _dp(sc, row, pair_caps, x[row, ix], g[row, ig], link_order[row], L)
            top = np.full(rows, np.inf)
            np.minimum.at(top, row, value)
            won = (value == top[row]) & (value < best[row])
            best[row[won]] = value[won]
            delta[row[won]] = trial[won]
        fits = np.all(delta <= caps, axis=1) & (delta.sum(axis=1) == L)
        return delta, np.where(fits, segment_cost(sc, delta), np.inf)


def _thresholds(
    sc: SegmentCosts, caps: IntArray, current: IntArray, L: int, width: int
) -> tuple[FloatArray, IntArray, FloatArray, IntArray]:
    """Candidate X̄ (R, X) and Γ̄ (R, G) of each row (∞: no threshold of that kind; NaN: an unused slot)
    and the device caps under each (R, X, K), (R, G, K) (0 under an unused slot)."""
    rows, _k = caps.shape
    d = np.arange(1, L + 1)
    allowed = d <= caps[:, :, None]  # (R, K, L)
    t_low = np.min(np.where(caps > 0, sc.link_s, np.inf), axis=1)
    x_floor = np.minimum(np.maximum(sc.stage_f, t_low), np.maximum(sc.stage_b, t_low) / sc.backward_ratio)
    x_values = np.where(allowed & (sc.c1 > 0)[:, None, None], sc.compute_s[:, :, None] * d, np.inf)
    g_values = np.where(allowed & ((sc.c2 > 0) | (sc.c3 > 0))[:, None, None], sc.gather_s, np.inf)
    on = current > 0
    x_now = np.max(np.where(on, current * sc.compute_s, 0.0), axis=1)
    index = np.clip(current - 1, 0, L - 1)[:, :, None]
    g_now = np.max(np.where(on, take_last(sc.gather_s, index)[:, :, 0], 0.0), axis=1)
    xs = _window(_merged_floor(x_values.reshape(rows, -1), x_floor), x_now, width)
    g_floor = np.where(sc.c3 > 0, 0.0, sc.gather_floor)  # below Γ_f thresholds differ only through c3·Γ̄
    gs = _window(_merged_floor(g_values.reshape(rows, -1), g_floor), g_now, width)
    # under a threshold the allowed d form a prefix (d·a_k grows; γ_k is non-decreasing)
    by_x = np.floor(xs[:, :, None] * (1 + TOLERANCE) / sc.compute_s[:, None, :])
    by_g = np.sum(sc.gather_s[:, None, :, :] <= gs[:, :, None, None] * (1 + TOLERANCE), axis=3)  # (R, G, K)
    x_caps = np.where(np.isinf(xs)[:, :, None], L, np.minimum(by_x, L))
    g_caps = np.where(np.isinf(gs)[:, :, None], L, by_g)
    x_caps = np.where(np.isnan(xs)[:, :, None], 0, np.minimum(np.nan_to_num(x_caps), caps[:, None]))
    g_caps = np.where(np.isnan(gs)[:, :, None], 0, np.minimum(g_caps, caps[:, None]))
    return xs, x_caps.astype(np.int64), gs, g_caps.astype(np.int64)


def _relaxation(per_block: FloatArray, caps: IntArray, L: int) -> FloatArray:
    """The LP relaxation (R, P) of L TEBs under caps (R, P, K): devices by their least cost per TEB within
    the cap (``per_block`` (R, K, L): min_{d' ≤ d} c_k(d')/d'), each filled up to its cap; ∞ when the caps
    hold fewer than L."""
    rows, _pairs, k = caps.shape
    flat = per_block.reshape(rows, 1, -1)  # (R, 1, K·L): device k's d at k·L + d − 1
    rate = take_last(flat, np.arange(k) * L + np.maximum(caps - 1, 0))  # (R, P, K)
    rate = np.where(caps > 0, rate, np.inf)
    order = np.argsort(rate, axis=2)
    rate = take_last(rate, order)
    room = take_last(caps, order)
    take = np.minimum(np.maximum(L - (np.cumsum(room, axis=2) - room), 0), room)
    lp = np.sum(np.where(take > 0, rate * take, 0.0), axis=2)
    return np.where(caps.sum(axis=2) >= L, lp, np.inf)


def _merged_floor(values: FloatArray, floor: FloatArray) -> FloatArray:
    """The distinct finite values of each row, sorted; those at or below the floor merged into the largest
    of them (they all charge the floor). Padded with NaN (unused); a row without any value has a single
    ∞ (no threshold of that kind)."""
    below = values <= floor[:, None]
    top_below = np.max(np.where(below, values, -np.inf), axis=1, keepdims=True)
    values = np.sort(np.where(below & (values < top_below), np.inf, values), axis=1)
    repeat = np.concatenate(
        [np.zeros((values.shape[0], 1), dtype=bool), values[:, 1:] == values[:, :-1]], axis=1
    )
    values = np.sort(np.where(repeat, np.inf, values), axis=1)
    count = max(int(np.max(np.sum(np.isfinite(values), axis=1))), 1)
    values = np.where(np.isfinite(values), values, np.nan)[:, :count]
    values[np.isnan(values[:, 0]), 0] = np.inf
    return values


def _window(values: FloatArray, now: FloatArray, width: int) -> FloatArray:
    """At most ``width`` of each row's sorted values (NaN-padded), centred on the one nearest ``now``."""
    if values.shape[1] <= width:
        return values
    n = np.maximum(np.sum(~np.isnan(values), axis=1), 1)
    distance = np.abs(values - now[:, None])
    nearest = np.argmin(np.where(np.isnan(distance), np.inf, distance), axis=1)
    start = np.clip(nearest - width // 2, 0, np.maximum(n - width, 0))
    return take_last(values, start[:, None] + np.arange(width))


@functools.cache
def _windows(width: int, lo: int, L: int) -> IntArray:
    """The columns (width, j) of dp[j − d], d = width − i at row i, j = lo..L, in dp padded with L ∞ on its
    left."""
    out: IntArray = L - width + np.arange(width)[:, None] + np.arange(lo, L + 1)
    return out


def _dp(
    sc: SegmentCosts, rows: IntArray, caps: IntArray, x: FloatArray, g: FloatArray, order: IntArray, L: int
) -> tuple[IntArray, FloatArray]:
    """The DP of a batch of (row, pair): rows (B,) of ``sc``, the pairs' caps (B, K), X̄, Γ̄ (B,) (0: none of
    that kind) and each row's device order (B, K); returns δ (B, K) and the cost charged at the thresholds
    (∞: no placement)."""
    batch, k = caps.shape
    at = np.arange(batch)
    j = np.arange(L + 1)
    dp = np.full((batch, L + 1), np.inf)
    choice = np.zeros((k, batch, L + 1), dtype=np.int64)
    started = np.zeros((k, batch, L + 1), dtype=bool)
    # every device's data in the batch's order (B, K, ...): its costs within its cap, and the schedule
    # started there (j = d, the maxima charged with T = its link time; j = 0 none)
    cap = take_last(caps, order)
    in_order = rows[:, None], order
    cost = np.where(np.arange(1, L + 1) <= cap[..., None], sc.cost[in_order], np.inf)  # (B, K, L)
    start_charge = _maxima(sc, rows[:, None], x[:, None], sc.link_s[in_order], g[:, None])  # (B, K)
    start = np.concatenate([np.full((batch, k, 1), np.inf), cost + start_charge[..., None]], axis=2)
    widths = cap.max(axis=0).tolist()
    padded = np.full((batch, 2 * L + 1), np.inf)  # dp with ∞ on its left (L: the widest segment)
    for step in range(k):
        from_start = start[:, step] < dp
        new, pick = np.minimum(dp, start[:, step]), j * from_start
        width = int(widths[step]) if step > 0 else 0
        if width > 0:
            # continuations dp[j − d] + c(d), d = width..1 (of equal ones the largest d; NaN: none); at the
            # last device only j = L, the one entry the result reads
            lo = L if step == k - 1 else 0
            padded[:, L:] = dp
            value = padded[:, _windows(width, lo, L)] + cost[:, step, width - 1 :: -1, None]  # (B, width, j)
            value[np.isnan(value)] = np.inf
            cont = value.min(axis=1)
            use = cont < new[:, lo:]
            np.copyto(new[:, lo:], cont, where=use)
            np.copyto(pick[:, lo:], width - value.argmin(axis=1), where=use)  # the first of equal: largest d
            from_start[:, lo:] &= ~use
        changed = new < dp
        np.multiply(pick, changed, out=choice[step])
        np.logical_and(changed, from_start, out=started[step])
        dp = new
    delta = np.zeros((batch, k), dtype=np.int64)
    left = np.full(batch, L)
    done = np.zeros(batch, dtype=bool)
    for step in range(k - 1, -1, -1):
        take = np.where(done, 0, choice[step, at, left])
        delta[at, order[:, step]] = take
        done |= started[step, at, left]
        left = left - take
    value = dp[:, L] + sc.constant[rows]
    return delta, np.where(np.isfinite(value) & (left == 0), value, np.inf)
