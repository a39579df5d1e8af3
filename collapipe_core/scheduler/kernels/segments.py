"""The segment step compiled (the model: ``scheduler/segments.py``): :func:`best_rows` runs the whole step
per row — the candidate thresholds, each (X̄, Γ̄) pair's device caps and LP lower bound
(:func:`_bound_pair`), the exact DP of the pairs in order of their bounds (:func:`_dp_pair`) while a pair
can still beat the best found, and the exact cost of the result.
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

# digests of the files whose jit helpers this one compiles in (why: scalars.py's docstring)
SCALARS_SHA256 = "c3b4f4258ac946f7"


@jit
def _dp_scratch(k, L):  # type: ignore[no-untyped-def]
    """Work arrays of :func:`_dp_pair`: dp (L + 1), choice and started (K, L + 1), later_max (K)."""
    return (
        np.empty(L + 1),
        np.zeros((k, L + 1), dtype=np.int64),
        np.zeros((k, L + 1), dtype=np.bool_),
        np.zeros(k, dtype=np.int64),
    )


@jit
def _dp_pair(caps, cost, link_s, terms, x_bar, g_bar, L, order, scratch, delta):  # type: ignore[no-untyped-def]
    """The exact DP of one (row, pair): writes δ (K,) and returns the cost charged at the thresholds (∞: no
    placement fills L).

    caps (K,) each device's cap under the pair (X̄, Γ̄; ∞: no threshold); cost (K, L) c_k(d) at index
    d − 1; link_s (K,) t_k; terms (6,) c1, c2, c_F, c_B, Γ_f and the row's constant; order: devices by
    decreasing t_k.

    Devices are taken in decreasing t_k (ties in device order), so the first scheduled one sets T. With
    dp_s[j] the least cost of j TEBs on the first s devices with the schedule started,

        dp_s[j] = min(dp_{s−1}[j], min_{1 ≤ d ≤ cap} dp_{s−1}[j − d] + c_s(d), c_s(j) + S_s)   (j ≤ cap)

    where S_s = c1·[max(c_F, X̄, t_s) + max(c_B, 2X̄, t_s)] + c2·max(Γ_f, Γ̄) charges the maxima when the
    schedule starts on device s (X̄, Γ̄ read as 0 when ∞). Ties keep the earlier device's entry, then the
    smallest d, then a continuation over a start. The cost is dp_K[L] plus the row's constant, ∞ if no
    placement fills L. Only the dp[j] from which the later devices can still reach L are updated (``lo``:
    the pair's own caps decide it).
    """
    dp, choice, started, later_max = scratch
    k = caps.shape[0]
    c1, c2, stage_f, stage_b, floor, constant = terms
    for i in range(k):
        delta[i] = 0
    after = 0
    for step in range(k - 1, -1, -1):  # the most TEBs the devices after each step can take
        later_max[step] = after
        after += caps[order[step]]
    if after < L:  # no placement fills L (a pruned pair has every cap 0)
        return INF
    x = x_bar if math.isfinite(x_bar) else 0.0
    g = g_bar if math.isfinite(g_bar) else 0.0
    dp[:] = INF
    choice[:] = 0
    started[:] = False
    for step in range(k):
        dev = order[step]
        cap = caps[dev]
        t = link_s[dev]
        stages = fmax(fmax(stage_f, x), t) + fmax(fmax(stage_b, 2 * x), t)
        start_cost = c1 * stages + c2 * fmax(floor, g)
        lo = max(0, L - later_max[step])
        for j in range(L, lo - 1, -1):  # descending: dp[j − d] is still the previous step's
            # min over d of dp[j − d] + c(d), the first least d; d above the cap or j is ∞ (as is the
            # whole minimum on the first device), read as d = 1 when nothing is finite
            best_c = INF
            best_d = 0
            if step > 0:
                for dd in range(1, min(cap, j) + 1):
                    v = dp[j - dd] + cost[dev, dd - 1]
                    if v < best_c:
                        best_c, best_d = v, dd - 1
            start = cost[dev, j - 1] + start_cost if 1 <= j <= cap else INF
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
        delta[order[step]] = take
        done = done or started[step, left]
        left -= take
    total = dp[L] + constant
    return total if math.isfinite(total) and left == 0 else INF


@jit
def _bound_scratch(k, L):  # type: ignore[no-untyped-def]
    """Work arrays of :func:`_bound_pair`: the row's prefixes (K, L) of :func:`_row_prefixes`, rate and
    taken (K) and an order (K)."""
    return np.empty((k, L)), np.empty((k, L)), np.empty(k), np.empty(k), np.empty(k, dtype=np.int64)


@jit
def _row_prefixes(cost, gather_s, scratch):  # type: ignore[no-untyped-def]
    """Per device of one row, over d = 1..L: the least cost per TEB min_{d' ≤ d} c_k(d')/d' and the
    largest gather time max_{d' ≤ d} γ_k(d') (NaN propagates: a NaN fails every threshold after it)."""
    rate_min, gather_max = scratch[0], scratch[1]
    k, L = cost.shape
    for i in range(k):
        rate = INF
        top = -INF
        for d in range(1, L + 1):
            rate = fmin(rate, cost[i, d - 1] / d)
            top = fmax(top, gather_s[i, d - 1])
            rate_min[i, d - 1] = rate
            gather_max[i, d - 1] = top


@jit
def _bound_pair(memory_caps, compute_s, link_s, terms, xb, gb, L, scratch, caps):  # type: ignore[no-untyped-def]
    """One row's device caps under the pair (X̄, Γ̄) (∞: no threshold), written into caps (K,), and the
    pair's lower bound on J; scratch holds the row's prefixes (:func:`_row_prefixes`).

    cap = the largest d ≤ memory cap with d·a_k ≤ X̄ and γ_k(d) ≤ Γ̄ (both to a relative 1e-12; the allowed d
    form a prefix, counted up to the first that fails). The bound is the LP relaxation — devices by their
    cheapest cost per TEB min_{d ≤ cap} c_k(d)/d, ascending (ties in device order), each filled up to its
    cap until L TEBs are placed (∞ if the caps hold fewer) — plus the constant and the maxima at the
    thresholds: c1·[max(c_F, X̄, T) + max(c_B, 2X̄, T)] + c2·max(Γ_f, Γ̄), T the fastest link with a cap
    (X̄, Γ̄ read as 0 when ∞).

    A device's allowed d are found by bisection (d·a_k grows with d; γ_k(d) is checked through its
    running maximum)."""
    rate_min, gather_max, rate, taken, order = scratch
    k = compute_s.shape[0]
    tol = 1 + 1e-12
    c1, c2, stage_f, stage_b, floor, constant = terms
    x_free, g_free = not math.isfinite(xb), not math.isfinite(gb)
    total_cap = 0
    fastest = INF
    for i in range(k):
        lo, hi = 0, min(L, memory_caps[i])  # the largest allowed d lies in [lo, hi]
        while lo < hi:
            d = (lo + hi + 1) // 2
            ok_x = x_free or d * compute_s[i] <= xb * tol
            ok_g = g_free or gather_max[i, d - 1] <= gb * tol
            if ok_x and ok_g:
                lo = d
            else:
                hi = d - 1
        cap = lo
        caps[i] = cap
        total_cap += cap
        rate[i] = rate_min[i, cap - 1] if cap > 0 else INF
        if cap > 0:
            fastest = fmin(fastest, link_s[i])
    sort_order(rate, False, order)
    before = 0.0
    for q in range(k):
        cap_q = float(caps[order[q]])
        take = fmin(fmax(L - before, 0.0), cap_q)
        taken[q] = rate[order[q]] * take if take > 0 else 0.0
        before += cap_q
    lp = row_sum(taken, k) if total_cap >= L else INF
    x = xb if math.isfinite(xb) else 0.0
    g = gb if math.isfinite(gb) else 0.0
    stages = fmax(fmax(stage_f, x), fastest) + fmax(fmax(stage_b, 2 * x), fastest)
    return lp + constant + (c1 * stages + c2 * fmax(floor, g))


def best_rows(
    cost: FloatArray,
    gather_s: FloatArray,
    memory_caps: IntArray,
    compute_s: FloatArray,
    link_s: FloatArray,
    row_terms: FloatArray,
    current: IntArray,
    num_blocks: int,
    width: int,
) -> tuple[IntArray, FloatArray]:
    """The whole segment step of every row: the best δ (R, K) and its exact cost J (R,) (∞: no placement).

    cost, gather_s (R, K, L) c_k(d), γ_k(d) at index d − 1; memory_caps, compute_s a_k, link_s t_k (R, K);
    row_terms (6, R): c1, c2, c_F, c_B, Γ_f, constant; ``current`` (R, K) seeds the incumbent when it
    fits; ``width`` the most thresholds of each kind (X̄ and Γ̄) examined, nearest the current solution's X
    and Γ.

    Per row: the thresholds (:func:`_sorted_runs`, :func:`_thresholds`, :func:`_window`), every pair's caps
    and lower bound (:func:`_bound_pair`), then the pairs in increasing bound (stable), each solved by the DP
    (:func:`_dp_pair`) until the bound reaches the best cost found (relative 1e-12); the result's exact
    cost by :func:`_segment_cost` (the DP's charge at the thresholds is an upper bound of it).
    """
    rows, k = compute_s.shape
    delta = np.empty((rows, k), dtype=np.int64)
    out = np.empty(rows)
    cost, gather_s, compute_s, link_s, terms = as_floats(
        cost, gather_s, compute_s, link_s, np.transpose(row_terms)
    )
    _best_rows(
        as_ints(memory_caps), cost, gather_s, compute_s, link_s, terms, as_ints(current), int(num_blocks),
        int(width), delta, out,
    )  # fmt: skip
    return delta, out


@jit
def _best_rows(memory_caps, cost, gather_s, compute_s, link_s, terms, current, L, width, delta, out):  # type: ignore[no-untyped-def]
    rows, k = compute_s.shape
    xs = np.empty(k * L)
    gs = np.empty(k * L)
    x_runs = np.empty((k, L))  # d·a_k of each device, d = 1..cap
    x_len = np.empty(k, dtype=np.int64)
    g_len = np.empty(k, dtype=np.int64)
    heads = np.empty(k, dtype=np.int64)
    pairs = width * width
    pair_caps = np.empty((pairs, k), dtype=np.int64)
    lower = np.empty(pairs)
    pair_order = np.empty(pairs, dtype=np.int64)
    x_bar = np.empty(pairs)
    g_bar = np.empty(pairs)
    link_order = np.empty(k, dtype=np.int64)
    trial = np.empty(k, dtype=np.int64)
    work = np.empty(k)
    bound_scratch = _bound_scratch(k, L)
    dp_scratch = _dp_scratch(k, L)
    for r in range(rows):
        c1, c2, stage_f, stage_b, floor, _constant = terms[r]
        caps = memory_caps[r]
        # candidate thresholds: X̄ from d·a_k (only with a stage term), Γ̄ from γ_k(d), for d ≤ the cap
        t_low = INF  # T is at least the fastest link that can be scheduled
        for i in range(k):
            if caps[i] > 0:
                t_low = fmin(t_low, link_s[r, i])
            for d in range(1, min(caps[i], L) + 1):
                x_runs[i, d - 1] = compute_s[r, i] * float(d)
            x_len[i] = min(caps[i], L) if c1 > 0 else 0
            g_len[i] = min(caps[i], L) if c2 > 0 else 0
        x_floor = fmin(fmax(stage_f, t_low), 0.5 * fmax(stage_b, t_low))
        nx = _thresholds(xs, _sorted_runs(x_runs, x_len, heads, xs), x_floor)
        ng = _thresholds(gs, _sorted_runs(gather_s[r], g_len, heads, gs), floor)
        x_now = 0.0
        g_now = 0.0
        for i in range(k):
            if current[r, i] > 0:
                x_now = fmax(x_now, current[r, i] * compute_s[r, i])
                g_now = fmax(g_now, gather_s[r, i, min(max(current[r, i] - 1, 0), L - 1)])
        x0, nx = _window(xs, nx, x_now, width)
        g0, ng = _window(gs, ng, g_now, width)
        count = nx * ng
        _row_prefixes(cost[r], gather_s[r], bound_scratch)
        for ix in range(nx):
            for ig in range(ng):
                p = ix * ng + ig
                x_bar[p] = xs[x0 + ix]
                g_bar[p] = gs[g0 + ig]
                lower[p] = _bound_pair(
                    caps,
                    compute_s[r],
                    link_s[r],
                    terms[r],
                    x_bar[p],
                    g_bar[p],
                    L,
                    bound_scratch,
                    pair_caps[p],
                )
        # the incumbent: the current placement if it fits
        total = 0
        fits = True
        for i in range(k):
            delta[r, i] = current[r, i]
            total += current[r, i]
            fits = fits and current[r, i] <= caps[i]
        best = (
            _segment_cost(cost[r], gather_s[r], compute_s[r], link_s[r], terms[r], delta[r], work)
            if (fits and total == L)
            else INF
        )
        sort_order(link_s[r], True, link_order)
        for p in range(count):  # NaN bounds (NaN costs) stop the search like ∞ ones
            lower[p] = lower[p] if lower[p] == lower[p] else INF
        if count <= 64:  # increasing bound, ties in pair order
            sort_order(lower[:count], False, pair_order[:count])
        else:
            pair_order[:count] = np.argsort(lower[:count], kind="mergesort")
        for p in pair_order[:count]:
            if not lower[p] < best * (1 - 1e-12):
                break  # the bounds are sorted: no pair left can do better
            x, g = x_bar[p], g_bar[p]
            value = _dp_pair(
                pair_caps[p], cost[r], link_s[r], terms[r], x, g, L, link_order, dp_scratch, trial
            )
            if value < best:
                best = value
                for i in range(k):
                    delta[r, i] = trial[i]
        total = 0
        fits = True
        for i in range(k):
            total += delta[r, i]
            fits = fits and delta[r, i] <= caps[i]
        out[r] = (
            _segment_cost(cost[r], gather_s[r], compute_s[r], link_s[r], terms[r], delta[r], work)
            if fits and total == L
            else INF
        )


@jit
def _sorted_runs(runs, lengths, heads, out):  # type: ignore[no-untyped-def]
    """The first lengths[i] values of every row i of ``runs`` (K, L), sorted ascending, into out; returns
    their count. Rows that do not decrease (d·a_k always; γ_k(d) in the link models) are merged, any
    other input is sorted."""
    k = runs.shape[0]
    n = 0
    ordered = True
    for i in range(k):
        for d in range(1, lengths[i]):
            ordered = ordered and runs[i, d - 1] <= runs[i, d]
        n += lengths[i]
    if not ordered:
        m = 0
        for i in range(k):
            for d in range(lengths[i]):
                out[m] = runs[i, d]
                m += 1
        out[:n].sort()
        return n
    heads[:] = 0
    for m in range(n):
        pick = -1
        for i in range(k):
            if heads[i] < lengths[i] and (pick < 0 or runs[i, heads[i]] < runs[pick, heads[pick]]):
                pick = i
        out[m] = runs[pick, heads[pick]]
        heads[pick] += 1
    return n


@jit
def _thresholds(v, n, floor):  # type: ignore[no-untyped-def]
    """Keeps the finite values of the sorted v[:n] in place, dropping those at or below the term's floor
    except the largest of them (a threshold there charges the floor, like that one); returns the count
    (at least 1: a lone ∞, no threshold, when no value is finite)."""
    top_below = -INF
    for i in range(n):
        if v[i] <= floor:
            top_below = fmax(top_below, v[i])
    m = 0
    for i in range(n):
        x = v[i]
        if math.isfinite(x) and not (x <= floor and x < top_below):
            v[m] = x
            m += 1
    if m == 0:
        v[0] = INF
        m = 1
    return m


@jit
def _window(v, n, now, width):  # type: ignore[no-untyped-def]
    """(start, count) of the at most ``width`` sorted thresholds v[:n] centred on the one nearest ``now``."""
    if n <= width:
        return 0, n
    pos = 0
    for i in range(1, n):
        if abs(v[i] - now) < abs(v[pos] - now):
            pos = i
    return min(max(pos - width // 2, 0), n - width), width


@jit
def _segment_cost(cost, gather_s, compute_s, link_s, terms, delta, work):  # type: ignore[no-untyped-def]
    """J(δ) of one row (memory caps not checked), as ``segments.segment_cost``."""
    k = delta.shape[0]
    last = cost.shape[1] - 1
    c1, c2, stage_f, stage_b, floor, constant = terms
    gam = 0.0
    x = 0.0
    t = 0.0
    for i in range(k):
        on = delta[i] > 0
        idx = min(max(delta[i] - 1, 0), last)
        work[i] = cost[i, idx] if on else 0.0
        gam = fmax(gam, gather_s[i, idx] if on else 0.0)
        x = fmax(x, delta[i] * compute_s[i] if on else 0.0)
        t = fmax(t, link_s[i] if on else 0.0)
    stages = fmax(fmax(stage_f, x), t) + fmax(fmax(stage_b, 2 * x), t)
    return row_sum(work, k) + constant + (c1 * stages + c2 * fmax(floor, gam))
