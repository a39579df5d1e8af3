"""The segment step compiled (the model: ``scheduler/segments.py``): the exact DP for every (row, threshold
pair) (:func:`segment_dp`) and each pair's device caps and LP lower bound, which order and prune the pairs
(:func:`pair_bounds`). Same arithmetic as the numpy formulation they replaced, element by element.
"""

from __future__ import annotations

import math

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.kernels.scalars import (
    INF,
    as_floats,
    as_ints,
    fmax,
    fmin,
    jit,
    row_sum,
    sort_order,
)
from collapipe_core.scheduler.problem import IntArray

# numba checks a kernel's disk cache against the kernel's own file only, and these kernels compile
# scalars.py's helpers into themselves: this digest of scalars.py (the first 16 hex digits of its
# SHA-256) makes a change there a change here too. tests/core/scheduler/kernels/test_cache.py checks it.
SCALARS_SHA256 = "c6bf313e426efeab"


def segment_dp(
    cost: FloatArray,
    link_s: FloatArray,
    row_terms: FloatArray,
    caps: IntArray,
    x_bar: FloatArray,
    g_bar: FloatArray,
    num_blocks: int,
) -> tuple[IntArray, FloatArray]:
    """Exact segment DP for every (row, threshold pair): δ (R, C, K) and the cost charged at the thresholds.

    cost (R, K, L) c_k(d) at index d − 1; link_s (R, K) t_k; row_terms (6, R): c1, c2, c_F, c_B, Γ_f and
    the constant of each row; caps (R, C, K) each device's cap under each pair (X̄, Γ̄) (R, C) (∞: none).

    Devices are taken in decreasing t_k (ties in device order), so the first scheduled one sets T. With
    dp_s[j] the least cost of j TEBs on the first s devices with the schedule started,

        dp_s[j] = min(dp_{s−1}[j], min_{1 ≤ d ≤ cap} dp_{s−1}[j − d] + c_s(d), c_s(j) + S_s)   (j ≤ cap)

    where S_s = c1·[max(c_F, X̄, t_s) + max(c_B, 2X̄, t_s)] + c2·max(Γ_f, Γ̄) charges the maxima when the
    schedule starts on device s (X̄, Γ̄ read as 0 when ∞). Ties keep the earlier device's entry, then the
    smallest d, then a continuation over a start. The cost is dp_K[L] plus the row's constant, ∞ if no
    placement fills L. Only the dp[j] from which the later devices can still reach L are updated (``lo``
    below, over the whole batch as in the numpy formulation).
    """
    rows, pairs, k = caps.shape
    delta = np.zeros((rows, pairs, k), dtype=np.int64)
    out = np.empty((rows, pairs))
    cost, link_s, terms, x_bar, g_bar = as_floats(cost, link_s, np.transpose(row_terms), x_bar, g_bar)
    _segment_dp(as_ints(caps), cost, link_s, terms, x_bar, g_bar, int(num_blocks), delta, out)
    return delta, out


@jit
def _segment_dp(caps, cost, link_s, terms, x_bar, g_bar, L, delta, out):  # type: ignore[no-untyped-def]
    rows, pairs, k = caps.shape
    order = np.empty((rows, k), dtype=np.int64)
    for r in range(rows):
        sort_order(link_s[r], True, order[r])
    # per step over the batch: the most TEBs the later devices can take (the lowest dp index still useful)
    later_max = np.zeros(k, dtype=np.int64)
    for r in range(rows):
        for c in range(pairs):
            after = 0
            for step in range(k - 1, -1, -1):
                cap = caps[r, c, order[r, step]]
                later_max[step] = max(later_max[step], after)
                after += cap
    dp = np.empty(L + 1)
    choice = np.zeros((k, L + 1), dtype=np.int64)
    started = np.zeros((k, L + 1), dtype=np.bool_)
    for r in range(rows):
        c1, c2, stage_f, stage_b, floor, constant = terms[r]
        for c in range(pairs):
            total_cap = 0
            for i in range(k):
                total_cap += caps[r, c, i]
            if total_cap < L:  # no placement fills L (a pruned pair has every cap 0)
                out[r, c] = INF
                continue
            x = x_bar[r, c] if math.isfinite(x_bar[r, c]) else 0.0
            g = g_bar[r, c] if math.isfinite(g_bar[r, c]) else 0.0
            dp[:] = INF
            choice[:] = 0
            started[:] = False
            for step in range(k):
                dev = order[r, step]
                cap = caps[r, c, dev]
                t = link_s[r, dev]
                stages = fmax(fmax(stage_f, x), t) + fmax(fmax(stage_b, 2 * x), t)
                start_cost = c1 * stages + c2 * fmax(floor, g)
                lo = max(0, L - later_max[step])
                for j in range(L, lo - 1, -1):  # descending: dp[j − d] is still the previous step's
                    # min over d of dp[j − d] + c(d), the first least d; d above the cap or j is ∞ (as is
                    # the whole minimum on the first device), read as d = 1 when nothing is finite
                    best_c = INF
                    best_d = 0
                    if step > 0:
                        for dd in range(1, min(cap, j) + 1):
                            v = dp[j - dd] + cost[r, dev, dd - 1]
                            if v < best_c:
                                best_c, best_d = v, dd - 1
                    start = cost[r, dev, j - 1] + start_cost if 1 <= j <= cap else INF
                    old = dp[j]
                    new = fmin(old, fmin(best_c, start))
                    if new < old:
                        choice[step, j] = best_d + 1 if best_c <= start else j
                        started[step, j] = start < best_c
                    else:
                        choice[step, j] = 0
                        started[step, j] = False
                    dp[j] = new
            left = L
            done = False
            for step in range(k - 1, -1, -1):
                take = 0 if done else choice[step, left]
                delta[r, c, order[r, step]] = take
                done = done or started[step, left]
                left -= take
            total = dp[L] + constant
            out[r, c] = total if math.isfinite(total) and left == 0 else INF


def pair_bounds(
    cost: FloatArray,
    gather_s: FloatArray,
    memory_caps: IntArray,
    compute_s: FloatArray,
    link_s: FloatArray,
    row_terms: FloatArray,
    x_bar: FloatArray,
    g_bar: FloatArray,
    num_blocks: int,
) -> tuple[IntArray, FloatArray]:
    """Each device's cap under each threshold pair (R, P, K) and the pair's lower bound on J (R, P).

    cost, gather_s (R, K, L) c_k(d), γ_k(d) at index d − 1; memory_caps, compute_s a_k, link_s t_k (R, K);
    row_terms (6, R): c1, c2, c_F, c_B, Γ_f, constant; x_bar, g_bar (R, P) the pairs (∞: no threshold).

    cap = the largest d ≤ memory cap with d·a_k ≤ X̄ and γ_k(d) ≤ Γ̄ (both to a relative 1e-12; the allowed d
    form a prefix, counted up to the first that fails). The bound is the LP relaxation — devices by their
    cheapest cost per TEB min_{d ≤ cap} c_k(d)/d, ascending (ties in device order), each filled up to its
    cap until L TEBs are placed (∞ if the caps hold fewer) — plus the constant and the maxima at the
    thresholds: c1·[max(c_F, X̄, T) + max(c_B, 2X̄, T)] + c2·max(Γ_f, Γ̄), T the fastest link with a cap
    (X̄, Γ̄ read as 0 when ∞).
    """
    rows, pairs = x_bar.shape
    k = compute_s.shape[1]
    caps = np.empty((rows, pairs, k), dtype=np.int64)
    lower = np.empty((rows, pairs))
    cost, gather_s, compute_s, link_s, terms, x_bar, g_bar = as_floats(
        cost, gather_s, compute_s, link_s, np.transpose(row_terms), x_bar, g_bar
    )
    num_blocks = int(num_blocks)
    _pair_bounds(
        as_ints(memory_caps), cost, gather_s, compute_s, link_s, terms, x_bar, g_bar, num_blocks, caps, lower
    )
    return caps, lower


@jit
def _pair_bounds(memory_caps, cost, gather_s, compute_s, link_s, terms, x_bar, g_bar, L, caps, lower):  # type: ignore[no-untyped-def]
    rows, pairs = x_bar.shape
    k = compute_s.shape[1]
    tol = 1 + 1e-12
    rate = np.empty(k)
    taken = np.empty(k)
    order = np.empty(k, dtype=np.int64)
    for r in range(rows):
        c1, c2, stage_f, stage_b, floor, constant = terms[r]
        for p in range(pairs):
            xb, gb = x_bar[r, p], g_bar[r, p]
            total_cap = 0
            fastest = INF
            for i in range(k):
                cap = 0
                for d in range(1, L + 1):
                    ok_x = d * compute_s[r, i] <= xb * tol or not math.isfinite(xb)
                    ok_g = gather_s[r, i, d - 1] <= gb * tol or not math.isfinite(gb)
                    if not (ok_x and ok_g and d <= memory_caps[r, i]):
                        break
                    cap = d
                caps[r, p, i] = cap
                total_cap += cap
                rate[i] = INF
                for d in range(1, cap + 1):
                    rate[i] = fmin(rate[i], cost[r, i, d - 1] / d)
                if cap > 0:
                    fastest = fmin(fastest, link_s[r, i])
            sort_order(rate, False, order)
            before = 0.0
            for q in range(k):
                cap_q = float(caps[r, p, order[q]])
                take = fmin(fmax(L - before, 0.0), cap_q)
                taken[q] = rate[order[q]] * take if take > 0 else 0.0
                before += cap_q
            lp = row_sum(taken, k) if total_cap >= L else INF
            x = xb if math.isfinite(xb) else 0.0
            g = gb if math.isfinite(gb) else 0.0
            stages = fmax(fmax(stage_f, x), fastest) + fmax(fmax(stage_b, 2 * x), fastest)
            lower[r, p] = lp + constant + (c1 * stages + c2 * fmax(floor, g))
