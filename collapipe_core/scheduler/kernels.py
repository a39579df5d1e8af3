"""Compiled (numba) kernels of DSSDA's hottest small-array steps: scalar loops, one row at a time.

- :func:`bandwidth_rows` — the bandwidth step's KKT structures (see ``bandwidth.py`` for the model):
  ~100 structures per row of a few devices, ~10 times per round; as numpy some 80 array calls on
  (rows, structures, devices) arrays, dominated by call overhead;
- :func:`segment_dp` — the segment step's exact DP for every (row, threshold pair) (``segments.py``);
- :func:`pair_bounds` — each pair's device caps and LP lower bound, which order and prune the pairs.

Each does the arithmetic of the numpy formulation it replaced, element by element and in the same
order: candidates in the same order, the first least one taken, sums over a row's devices in numpy's
pairwise order (``_row_sum``); on every call captured the outputs were bit-identical. Ties of two
devices' sort keys may be ordered differently from numpy's argsort (unstable, SIMD): here they keep
device order.

Compiled on first use and cached on disk (``cache=True``: ``__pycache__`` beside this file, or numba's
user-wide cache directory when that is not writable); docs/scheduler.md gives the compile times.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.problem import IntArray

_INF = math.inf
# slope multipliers of the κ families: link target σ1 ∈ {0, 1, 2}·c1·P, gather target σ2 ∈ {0, 1}·c2·B,
# tied targets σ1 + δ*·σ2 for the five (link, gather) pairs below
_LINK = (0.0, 1.0, 2.0)
_GATHER = (0.0, 1.0)
_TIED_LINK = (0.0, 1.0, 1.0, 2.0, 2.0)
_TIED_GATHER = (1.0, 0.0, 1.0, 0.0, 1.0)

_jit = numba.njit(cache=True, error_model="numpy", nogil=True)
_WS_ROWS = 8  # scratch rows: 4 in _structures and 4 for its _kappa calls, 4 in _normalise


def bandwidth_rows(
    delta: IntArray,
    intercept: FloatArray,
    slope: FloatArray,
    terms: FloatArray,
    p_bits: float,
    b_bits: float,
) -> tuple[FloatArray, FloatArray]:
    """Exact β (R, K) and the tied prices' range [μ_lo, μ_hi] (R, 2) of every row.

    delta (R, K) int TEBs (0 = not scheduled); the rate model r_k = intercept_k + slope_k·β_k (R, K);
    terms (6, R): a, c1, c2, c^F, c^B, Γ_f of each row; p_bits, b_bits the payload and block sizes.

    Per row, with ζ_k = 1/slope_k and E = 1 + Σ_k intercept_k·ζ_k: every KKT structure (free and kink
    targets, see :func:`_structures`) gives free factors c_k and fixed bounds F_k; the budget Σ ζ_k/u_k = E
    fixes u_k = min(F_k, s·c_k) (:func:`_normalise`); the structure of least
    Lat(u) = a·Σu + c1·[max(c^F, P·max u) + max(c^B, P·max u)] + c2·max(Γ_f, B·max δu) is taken (the first
    of equal ones), β_k = ζ_k/u_k − intercept_k·ζ_k (at least 1e-9, the row scaled to Σβ ≤ 1), and
    [μ_lo, μ_hi] the range of s² over the structures within 1e-9 (relative) of the least cost.
    """
    rows, k = delta.shape
    beta = np.empty((rows, k))
    bracket = np.empty((rows, 2))
    intercept, slope, row_terms = _floats(intercept, slope, np.transpose(terms))  # row_terms (R, 6)
    _bandwidth_rows(_ints(delta), intercept, slope, row_terms, float(p_bits), float(b_bits), beta, bracket)
    return beta, bracket


def _floats(*arrays: FloatArray) -> tuple[FloatArray, ...]:
    return tuple(np.ascontiguousarray(x, dtype=np.float64) for x in arrays)


def _ints(x: IntArray) -> IntArray:
    return np.ascontiguousarray(x, dtype=np.int64)


@_jit
def _bandwidth_rows(delta, intercept, slope, terms, p_bits, b_bits, beta, bracket):  # type: ignore[no-untyped-def]
    rows, k = delta.shape
    on = np.empty(k, dtype=np.bool_)
    d = np.empty(k)
    z = np.empty(k)
    zn = np.empty(k)
    work = np.empty(k)
    u = np.empty(k)
    u_best = np.empty(k)
    ws = np.empty((_WS_ROWS, k))  # scratch of the row helpers
    idx = np.empty(k, dtype=np.int64)
    most = 13 * (k + 1) + 2 + 8 * k  # structures of a row with k distinct δ
    free_all = np.empty((most, k))
    fixed_all = np.empty((most, k))
    cost_all = np.empty(most)
    price_all = np.empty(most)
    k1_all = np.empty((k + 1, 3))
    k2_all = np.empty((k + 1, 2))
    m_all = np.empty((k, k))
    kt_all = np.empty((k, 5))
    side = np.empty(k, dtype=np.bool_)
    thr = np.empty(k + 1)
    scratch = (k1_all, k2_all, m_all, kt_all, side, thr, ws, idx)
    for r in range(rows):
        for i in range(k):
            on[i] = delta[r, i] > 0
            d[i] = float(delta[r, i]) if on[i] else 1.0
            z[i] = 1.0 / slope[r, i] if on[i] else 0.0  # ζ = 1/d_k
            work[i] = intercept[r, i] * z[i] if on[i] else 0.0
        extra = 1.0 + _row_sum(work, k)  # 1 + Σ c/d
        for i in range(k):
            zn[i] = z[i] / extra
        n = _structures(z, d, on, terms[r], p_bits, b_bits, free_all, fixed_all, scratch)
        free, fixed, cost, price = free_all[:n], fixed_all[:n], cost_all[:n], price_all[:n]
        best = -1
        for c in range(n):
            price[c] = _normalise(zn, free[c], fixed[c], on, u, ws[4:], idx)
            cost[c] = _cost(u, d, on, terms[r], p_bits, b_bits, work)
            if best < 0 or (not math.isnan(cost[best]) and (cost[c] < cost[best] or math.isnan(cost[c]))):
                best = c
                for i in range(k):
                    u_best[i] = u[i]
        for i in range(k):
            if on[i]:
                b = z[i] / u_best[i] - intercept[r, i] * z[i]
                work[i] = _max(b, 1e-9)
            else:
                work[i] = 0.0
        scale = _max(_row_sum(work, k), 1.0)  # guard rounding above 1
        for i in range(k):
            beta[r, i] = work[i] / scale
        low = cost[best]
        lo, hi = _INF, -_INF
        for c in range(n):
            if math.isfinite(price[c]) and cost[c] <= low * (1 + 1e-9) + 1e-300:
                mu = price[c] * price[c]
                lo = _min(lo, mu)
                hi = _max(hi, mu)
        lo = lo if math.isfinite(lo) else 0.0
        bracket[r, 0] = lo
        bracket[r, 1] = hi if math.isfinite(hi) else lo


@_jit
def _structures(z, d, on, row, p_bits, b_bits, free, fixed, scratch):  # type: ignore[no-untyped-def]
    """Free factors c_k and fixed bounds F_k (C, K) of every KKT structure of one row, in this order;
    written into the first C rows of ``free`` and ``fixed``, returns C.

    (A) separate targets, at thresholds t ∈ {0} ∪ {distinct δ}: devices with δ ≤ t bind the link target
        z1 = s·κ1 (slope σ1 ∈ {0, 1, 2}·c1·P of its term, or z1 at a kink c^F/P, c^B/P), the others the
        gather target z2 = s·κ2 (σ2 ∈ {0, 1}·c2·B, or z2 at its kink Γ_f/B), so c_k = κ1 or κ2/δ_k:
        free × free (t, σ1, σ2), link kink × free gather (kink, t, σ2), free link × gather kink (t, σ1),
        both at kinks (kink);
    (B) tied targets at ratio z2/z1 = δ* ∈ {distinct δ}: one target with m_k = min(1, δ*/δ_k), c_k = m_k·κ
        (slope σ1 + δ*·σ2, five pairs), then at a kink of either term (δ*, kink: c^F/P, c^B/P, Γ_f/(B·δ*)).
    A free factor ∞ is a structure without a free target, a fixed bound ∞ one without a kink; every device
    is also capped by its interior (water-filling) value c_k ≤ √(ζ_k/a).
    """
    k = z.shape[0]
    a, c1, c2, stage_f, stage_b, floor = row
    k1, k2, m, kt, side, thr, ws, idx = scratch
    link_slope, gather_slope = c1 * p_bits, c2 * b_bits
    a_eff = a + 1e-12 * (link_slope + gather_slope) + 1e-300
    interior, star, ones, inv_d = ws[0], ws[1], ws[2], ws[3]
    kappa_ws = ws[4:]
    for i in range(k):
        interior[i] = math.sqrt(z[i] / a_eff) if on[i] else _INF
        ones[i] = 1.0
        inv_d[i] = 1.0 / d[i]
    nu = _distinct(d, on, star)  # star[:nu]: the distinct δ
    nj = nu + 1
    thr[0] = 0.0
    for t in range(nu):
        thr[t + 1] = star[t]
    kink1 = (stage_f / p_bits, stage_b / p_bits)
    kink2 = floor / b_bits
    sigmas = np.empty(5)
    for t in range(nu):
        for i in range(k):
            m[t, i] = _min(1.0, star[t] / d[i])
    for g in range(2 * nj + nu):  # groups: link targets (j), gather targets (j), tied targets (δ*)
        if g < nj:
            for i in range(k):
                side[i] = d[i] <= thr[g] and on[i]
            for s in range(3):
                sigmas[s] = link_slope * _LINK[s]
            group_m, out = ones, k1[g]
        elif g < 2 * nj:
            for i in range(k):
                side[i] = not d[i] <= thr[g - nj] and on[i]
            for s in range(2):
                sigmas[s] = gather_slope * _GATHER[s]
            group_m, out = inv_d, k2[g - nj]
        else:
            t = g - 2 * nj
            for i in range(k):
                side[i] = on[i]
            for s in range(5):
                sigmas[s] = link_slope * _TIED_LINK[s] + star[t] * (gather_slope * _TIED_GATHER[s])
            group_m, out = m[t], kt[t]
        _kappa(z, group_m, side, a, sigmas, out, kappa_ws, idx)
    n = 6 * nj + 4 * nj + 3 * nj + 2 + 5 * nu + 3 * nu
    c = 0
    for j in range(nj):  # (A) free × free
        for s1 in range(3):
            for s2 in range(2):
                for i in range(k):
                    free[c, i] = _min(k1[j, s1], k2[j, s2] / d[i])
                    fixed[c, i] = _INF
                c += 1
    for kink in range(2):  # (A) link at a kink × free gather
        for j in range(nj):
            for s2 in range(2):
                for i in range(k):
                    free[c, i] = k2[j, s2] / d[i]
                    fixed[c, i] = kink1[kink]
                c += 1
    for j in range(nj):  # (A) free link × gather at its kink
        for s1 in range(3):
            for i in range(k):
                free[c, i] = k1[j, s1]
                fixed[c, i] = kink2 / d[i]
            c += 1
    for kink in range(2):  # (A) both at kinks
        for i in range(k):
            free[c, i] = _INF
            fixed[c, i] = _min(kink1[kink], kink2 / d[i])
        c += 1
    for t in range(nu):  # (B) tied
        for s in range(5):
            for i in range(k):
                free[c, i] = m[t, i] * kt[t, s]
                fixed[c, i] = _INF
            c += 1
    for t in range(nu):  # (B) tied at a kink
        for kink in range(3):
            for i in range(k):
                free[c, i] = _INF
                fixed[c, i] = m[t, i] * (kink1[kink] if kink < 2 else kink2 / star[t])
            c += 1
    for c in range(n):
        for i in range(k):
            free[c, i] = _min(free[c, i], interior[i])
    return n


@_jit
def _distinct(d, on, out):  # type: ignore[no-untyped-def]
    """The distinct δ of the scheduled devices into out[:U], ascending; returns U (0 alone if none is on)."""
    n = 0
    for i in range(d.shape[0]):
        if on[i]:  # insert d[i] into the sorted out[:n] unless present
            p = n
            while p > 0 and out[p - 1] > d[i]:
                p -= 1
            if p > 0 and out[p - 1] == d[i]:
                continue
            for q in range(n, p, -1):
                out[q] = out[q - 1]
            out[p] = d[i]
            n += 1
    if n == 0:
        out[0] = 0.0
        n = 1
    return n


@_jit
def _kappa(z, m, side, a, sigmas, out, ws, idx):  # type: ignore[no-untyped-def]
    """κ with κ² = Σ_B (ζ_k/m_k) / (σ + a·Σ_B m_k) over the devices B bound by a target of slope σ.

    The devices of the group (``side``) are sorted by ζ_k/m_k² (descending); B is the longest prefix whose
    last device i meets the water-filling condition ζ_i/m_i²·(σ + a·Σ_{≤i} m) ≥ a·Σ_{≤i} ζ/m (true on a
    prefix). ∞ when σ = 0 (a term without that target) or the group is empty. One κ per slope into
    ``out``; ``ws`` (4, K), ``idx`` scratch.
    """
    k = z.shape[0]
    key, mm, c_zm, c_m = ws[0], ws[1], ws[2], ws[3]
    for i in range(k):
        mm[i] = m[i] if side[i] else 1.0
        key[i] = z[i] / (mm[i] * mm[i]) if side[i] else 0.0
    order = _order(key, True, idx)
    zm = m_sum = 0.0
    for p in range(k):
        ks = key[order[p]]
        ms = mm[order[p]]
        zm += ks * ms if ks > 0 else 0.0
        m_sum += ms if ks > 0 else 0.0
        c_zm[p], c_m[p] = zm, m_sum
    for s in range(out.shape[0]):
        sigma = sigmas[s]
        last = 0  # devices meeting the condition (a prefix)
        for p in range(k):
            ks = key[order[p]]
            if ks > 0 and ks * (sigma + a * c_m[p]) >= a * c_zm[p] * (1 - 1e-12):
                last += 1
        num, den = c_zm[max(last - 1, 0)], c_m[max(last - 1, 0)]
        out[s] = math.sqrt(num / (sigma + a * den)) if last > 0 and sigma > 0 else _INF


@_jit
def _normalise(zn, free, fixed, on, u, ws, idx):  # type: ignore[no-untyped-def]
    """u_k = min(F_k, s·c_k) with Σ ζ_k/u_k = 1 (ζ divided by E) into ``u``; returns s (infeasible: ∞, u = ∞).

    With y = 1/s the bandwidth Σ_k max(ζ_k/F_k, y·ζ_k/c_k) is piecewise linear and increasing; device k
    switches to its free bound at y = c_k/F_k. After sorting the switch points, the piece with the first
    i devices switched gives y = (1 − Σ_{>i} ζ/F)/Σ_{≤i} ζ/c, valid if it lies between its switch points.
    """
    k = zn.shape[0]
    base, slope, bp, sorted_base = ws[0], ws[1], ws[2], ws[3]
    for i in range(k):
        finite = on[i] and math.isfinite(free[i])
        base[i] = zn[i] / fixed[i] if on[i] else 0.0  # ζ/F (0 when F = ∞)
        slope[i] = zn[i] / free[i] if finite else 0.0  # ζ/c
        bp[i] = free[i] / fixed[i] if finite else _INF
    order = _order(bp, False, idx)
    for p in range(k):
        sorted_base[p] = base[order[p]]
    total = _row_sum(sorted_base, k)
    lin = 0.0
    acc = 0.0
    y_sol = -1.0
    for p in range(k):
        lin += slope[order[p]]
        acc += sorted_base[p]
        y = (1.0 - (total - acc)) / lin
        bps = bp[order[p]]
        valid = lin > 0 and y >= bps * (1 - 1e-12) and math.isfinite(bps)
        if p < k - 1:
            valid = valid and y <= bp[order[p + 1]] * (1 + 1e-12)  # below the next switch point
        if valid:
            y_sol = _max(y_sol, y)
    feasible = y_sol > 0
    s = 1.0 / y_sol if feasible else _INF
    for i in range(k):
        u[i] = _min(fixed[i], s * free[i]) if on[i] and feasible else _INF
    return s


@_jit
def _cost(u, d, on, row, p_bits, b_bits, work):  # type: ignore[no-untyped-def]
    """Lat(u) of one structure (∞ if any scheduled u_k is not finite); ``work`` is scratch."""
    k = u.shape[0]
    a, c1, c2, stage_f, stage_b, floor = row
    z1 = -_INF
    z2 = -_INF
    finite = True
    for i in range(k):
        uu = u[i] if on[i] else 0.0
        work[i] = uu
        z1 = _max(z1, uu)
        z2 = _max(z2, d[i] * uu)
        finite = finite and math.isfinite(uu)
    if not finite:
        return _INF
    link = p_bits * z1
    return (
        a * _row_sum(work, k)
        + c1 * (_max(stage_f, link) + _max(stage_b, link))
        + c2 * _max(floor, b_bits * z2)
    )


@_jit
def _order(x, descending, idx):  # type: ignore[no-untyped-def]
    """Indices sorting x (ascending or descending) into idx, ties in index order (insertion sort)."""
    k = x.shape[0]
    for i in range(k):
        idx[i] = i
    for i in range(1, k):
        j = i
        while j > 0:
            prev, cur = x[idx[j - 1]], x[idx[j]]
            if (cur > prev) if descending else (cur < prev):
                idx[j - 1], idx[j] = idx[j], idx[j - 1]
                j -= 1
            else:
                break
    return idx


@_jit
def _row_sum(x, n):  # type: ignore[no-untyped-def]
    """Σ x[:n] in numpy's order for a contiguous row (pairwise: sequential below 8, 8 accumulators to 128)."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[i]
        return res
    if n <= 128:
        r = x[:8].copy()
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += x[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += x[i]
            i += 1
        return res
    half = n // 2
    half -= half % 8
    return _row_sum(x[:half], half) + _row_sum(x[half:], n - half)


@_jit
def _min(x, y):  # type: ignore[no-untyped-def]
    """np.minimum of two floats (NaN propagates)."""
    return x if (x <= y or x != x) else y


@_jit
def _max(x, y):  # type: ignore[no-untyped-def]
    """np.maximum of two floats (NaN propagates)."""
    return x if (x >= y or x != x) else y


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
    cost, link_s, terms, x_bar, g_bar = _floats(cost, link_s, np.transpose(row_terms), x_bar, g_bar)
    _segment_dp(_ints(caps), cost, link_s, terms, x_bar, g_bar, int(num_blocks), delta, out)
    return delta, out


@_jit
def _segment_dp(caps, cost, link_s, terms, x_bar, g_bar, L, delta, out):  # type: ignore[no-untyped-def]
    rows, pairs, k = caps.shape
    order = np.empty((rows, k), dtype=np.int64)
    for r in range(rows):
        _order(link_s[r], True, order[r])
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
                out[r, c] = _INF
                continue
            x = x_bar[r, c] if math.isfinite(x_bar[r, c]) else 0.0
            g = g_bar[r, c] if math.isfinite(g_bar[r, c]) else 0.0
            dp[:] = _INF
            choice[:] = 0
            started[:] = False
            for step in range(k):
                dev = order[r, step]
                cap = caps[r, c, dev]
                t = link_s[r, dev]
                stages = _max(_max(stage_f, x), t) + _max(_max(stage_b, 2 * x), t)
                start_cost = c1 * stages + c2 * _max(floor, g)
                lo = max(0, L - later_max[step])
                for j in range(L, lo - 1, -1):  # descending: dp[j − d] is still the previous step's
                    # min over d of dp[j − d] + c(d), the first least d; d above the cap or j is ∞ (as is
                    # the whole minimum on the first device), read as d = 1 when nothing is finite
                    best_c = _INF
                    best_d = 0
                    if step > 0:
                        for dd in range(1, min(cap, j) + 1):
                            v = dp[j - dd] + cost[r, dev, dd - 1]
                            if v < best_c:
                                best_c, best_d = v, dd - 1
                    start = cost[r, dev, j - 1] + start_cost if 1 <= j <= cap else _INF
                    old = dp[j]
                    new = _min(old, _min(best_c, start))
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
            out[r, c] = total if math.isfinite(total) and left == 0 else _INF


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
    cost, gather_s, compute_s, link_s, terms, x_bar, g_bar = _floats(
        cost, gather_s, compute_s, link_s, np.transpose(row_terms), x_bar, g_bar
    )
    num_blocks = int(num_blocks)
    _pair_bounds(
        _ints(memory_caps), cost, gather_s, compute_s, link_s, terms, x_bar, g_bar, num_blocks, caps, lower
    )
    return caps, lower


@_jit
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
            fastest = _INF
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
                rate[i] = _INF
                for d in range(1, cap + 1):
                    rate[i] = _min(rate[i], cost[r, i, d - 1] / d)
                if cap > 0:
                    fastest = _min(fastest, link_s[r, i])
            _order(rate, False, order)
            before = 0.0
            for q in range(k):
                cap_q = float(caps[r, p, order[q]])
                take = _min(_max(L - before, 0.0), cap_q)
                taken[q] = rate[order[q]] * take if take > 0 else 0.0
                before += cap_q
            lp = _row_sum(taken, k) if total_cap >= L else _INF
            x = xb if math.isfinite(xb) else 0.0
            g = gb if math.isfinite(gb) else 0.0
            stages = _max(_max(stage_f, x), fastest) + _max(_max(stage_b, 2 * x), fastest)
            lower[r, p] = lp + constant + (c1 * stages + c2 * _max(floor, g))
