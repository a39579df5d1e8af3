"""The bandwidth step's KKT structures, compiled (the model: ``scheduler/bandwidth.py``).

:func:`bandwidth_rows` enumerates ~100 structures per row of a few devices, ~10 times per round; as numpy
it was some 80 array calls on (rows, structures, devices) arrays, dominated by call overhead. The
arithmetic is that of the numpy formulation it replaced, element by element and in the same order
(candidates in the same order, the first least one taken, sums in numpy's pairwise order). Most
structures of a row repeat an earlier one (a target of slope 0 or without devices has κ = ∞, so many
families reduce to the interior caps; about four in five on the decisions' rows): a structure whose
(c_k, F_k) bits on the scheduled devices are those of an earlier one takes its price and cost without
being solved again — the same figures, and it cannot change the pick, which keeps the first of equal ones.
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

# slope multipliers of the κ families: link target σ1 ∈ {0, 1, 2}·c1·P, gather target σ2 ∈ {0, 1}·c2·B,
# tied targets σ1 + δ*·σ2 for the five (link, gather) pairs below
_LINK = (0.0, 1.0, 2.0)
_GATHER = (0.0, 1.0)
_TIED_LINK = (0.0, 1.0, 1.0, 2.0, 2.0)
_TIED_GATHER = (1.0, 0.0, 1.0, 0.0, 1.0)

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
    [μ_lo, μ_hi] the range of s² over the structures within 1e-9 (relative) of the least cost. A structure
    that repeats an earlier one is not solved again.
    """
    rows, k = delta.shape
    beta = np.empty((rows, k))
    bracket = np.empty((rows, 2))
    intercept, slope, row_terms = as_floats(intercept, slope, np.transpose(terms))  # row_terms (R, 6)
    _bandwidth_rows(as_ints(delta), intercept, slope, row_terms, float(p_bits), float(b_bits), beta, bracket)
    return beta, bracket


@jit
def _bandwidth_rows(delta, intercept, slope, terms, p_bits, b_bits, beta, bracket):  # type: ignore[no-untyped-def]
    scratch = bandwidth_scratch(delta.shape[1])
    for r in range(delta.shape[0]):
        lo, hi = bandwidth_row(delta[r], intercept[r], slope[r], terms[r], p_bits, b_bits, beta[r], scratch)
        bracket[r, 0] = lo
        bracket[r, 1] = hi


@jit
def bandwidth_scratch(k):  # type: ignore[no-untyped-def]
    """The work arrays of :func:`bandwidth_row` for rows of k devices (allocated once per kernel call)."""
    most = 13 * (k + 1) + 2 + 8 * k  # structures of a row with k distinct δ
    ws = np.empty((_WS_ROWS, k))  # scratch of the row helpers
    idx = np.empty(k, dtype=np.int64)
    row = (
        np.empty(k, dtype=np.bool_),  # on
        np.empty(k),  # d
        np.empty(k),  # z
        np.empty(k),  # zn
        np.empty(k),  # work
        np.empty(k),  # u
        np.empty(k),  # u_best
        np.empty((most, k)),  # free factors
        np.empty((most, k)),  # fixed bounds
        np.empty(most),  # costs
        np.empty(most),  # prices
        np.empty(_table_size(most), dtype=np.int64),  # hash table of the structures solved: index
        np.empty(_table_size(most), dtype=np.int64),  # and key
    )
    structures = (
        np.empty((k + 1, 3)),  # κ1
        np.empty((k + 1, 2)),  # κ2
        np.empty((k, k)),  # m
        np.empty((k, 5)),  # κ tied
        np.empty(k, dtype=np.bool_),  # side
        np.empty(k + 1),  # thresholds
        ws,
        idx,
    )
    return row, structures


@jit
def bandwidth_row(delta, intercept, slope, row, p_bits, b_bits, beta, scratch):  # type: ignore[no-untyped-def]
    """One row of :func:`bandwidth_rows`: β (K,) into ``beta``; returns the price range (μ_lo, μ_hi).

    delta (K,) int, intercept and slope (K,) the rate model, row (6,) its terms a, c1, c2, c^F, c^B, Γ_f;
    ``scratch`` from :func:`bandwidth_scratch`.
    """
    k = delta.shape[0]
    row_ws, structures = scratch
    on, d, z, zn, work, u, u_best, free_all, fixed_all, cost_all, price_all, seen, keys = row_ws
    ws, idx = structures[6], structures[7]
    for i in range(k):
        on[i] = delta[i] > 0
        d[i] = float(delta[i]) if on[i] else 1.0
        z[i] = 1.0 / slope[i] if on[i] else 0.0  # ζ = 1/d_k
        work[i] = intercept[i] * z[i] if on[i] else 0.0
    extra = 1.0 + row_sum(work, k)  # 1 + Σ c/d
    for i in range(k):
        zn[i] = z[i] / extra
    n = _structures(z, d, on, row, p_bits, b_bits, free_all, fixed_all, structures)
    cost, price = cost_all[:n], price_all[:n]
    free_bits, fixed_bits = free_all.view(np.int64), fixed_all.view(np.int64)
    mask = seen.shape[0] - 1
    seen[:] = -1
    best = -1
    normalise_ws = (ws[4], ws[5], ws[6], ws[7])
    for c in range(n):
        # a structure with the same bits of (c_k, F_k) on the scheduled devices as an earlier one has its
        # price and cost, and cannot change the pick (the first of equal ones): not solved again
        key = _structure_key(free_bits, fixed_bits, c, on)
        slot = key & mask
        same = -1
        while seen[slot] >= 0:
            e = seen[slot]
            if keys[slot] == key and _same_structure(free_bits, fixed_bits, c, e, on):
                same = e
                break
            slot = (slot + 1) & mask
        if same >= 0:
            price[c] = price[same]
            cost[c] = cost[same]
            continue
        seen[slot] = c
        keys[slot] = key
        price[c] = _normalise(zn, free_all, fixed_all, c, on, u, normalise_ws, idx)
        cost[c] = row_latency(u, d, on, row, p_bits, b_bits, work)
        if best < 0 or (not math.isnan(cost[best]) and (cost[c] < cost[best] or math.isnan(cost[c]))):
            best = c
            for i in range(k):
                u_best[i] = u[i]
    for i in range(k):
        if on[i]:
            b = z[i] / u_best[i] - intercept[i] * z[i]
            work[i] = fmax(b, 1e-9)
        else:
            work[i] = 0.0
    scale = fmax(row_sum(work, k), 1.0)  # guard rounding above 1
    for i in range(k):
        beta[i] = work[i] / scale
    low = cost[best]
    lo, hi = INF, -INF
    for c in range(n):
        if math.isfinite(price[c]) and cost[c] <= low * (1 + 1e-9) + 1e-300:
            mu = price[c] * price[c]
            lo = fmin(lo, mu)
            hi = fmax(hi, mu)
    lo = lo if math.isfinite(lo) else 0.0
    return lo, (hi if math.isfinite(hi) else lo)


@jit
def _table_size(n):  # type: ignore[no-untyped-def]
    """A power of two of at least 2·n."""
    size = 1
    while size < 2 * n:
        size *= 2
    return size


@jit
def _structure_key(free_bits, fixed_bits, c, on):  # type: ignore[no-untyped-def]
    """A hash of structure c's (c_k, F_k) bits on the scheduled devices (non-negative)."""
    key = 0
    for i in range(on.shape[0]):
        if on[i]:
            key = (key ^ free_bits[c, i]) * 0x100000001B3
            key = (key ^ fixed_bits[c, i]) * 0x100000001B3
    return (key ^ (key >> 29)) & 0x7FFFFFFFFFFFFFFF


@jit
def _same_structure(free_bits, fixed_bits, c, e, on):  # type: ignore[no-untyped-def]
    """Structures c and e have the same bits of (c_k, F_k) on the scheduled devices."""
    for i in range(on.shape[0]):
        if on[i] and (free_bits[c, i] != free_bits[e, i] or fixed_bits[c, i] != fixed_bits[e, i]):
            return False
    return True


@jit
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
        interior[i] = math.sqrt(z[i] / a_eff) if on[i] else INF
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
            m[t, i] = fmin(1.0, star[t] / d[i])
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
                    free[c, i] = fmin(k1[j, s1], k2[j, s2] / d[i])
                    fixed[c, i] = INF
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
            free[c, i] = INF
            fixed[c, i] = fmin(kink1[kink], kink2 / d[i])
        c += 1
    for t in range(nu):  # (B) tied
        for s in range(5):
            for i in range(k):
                free[c, i] = m[t, i] * kt[t, s]
                fixed[c, i] = INF
            c += 1
    for t in range(nu):  # (B) tied at a kink
        for kink in range(3):
            for i in range(k):
                free[c, i] = INF
                fixed[c, i] = m[t, i] * (kink1[kink] if kink < 2 else kink2 / star[t])
            c += 1
    for c in range(n):
        for i in range(k):
            free[c, i] = fmin(free[c, i], interior[i])
    return n


@jit
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


@jit
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
    order = sort_order(key, True, idx)
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
        out[s] = math.sqrt(num / (sigma + a * den)) if last > 0 and sigma > 0 else INF


@jit
def _normalise(zn, free, fixed, c, on, u, ws, idx):  # type: ignore[no-untyped-def]
    """u_k = min(F_k, s·c_k) of structure c (free factors, fixed bounds (C, K)) with Σ ζ_k/u_k = 1 (ζ
    divided by E) into ``u``; returns s (infeasible: ∞, u = ∞).

    With y = 1/s the bandwidth Σ_k max(ζ_k/F_k, y·ζ_k/c_k) is piecewise linear and increasing; device k
    switches to its free bound at y = c_k/F_k. After sorting the switch points, the piece with the first
    i devices switched gives y = (1 − Σ_{>i} ζ/F)/Σ_{≤i} ζ/c, valid if it lies between its switch points.
    """
    k = zn.shape[0]
    base, slope, bp, sorted_base = ws
    for i in range(k):
        fr = free[c, i]
        fx = fixed[c, i]
        finite = on[i] and math.isfinite(fr)
        base[i] = zn[i] / fx if on[i] else 0.0  # ζ/F (0 when F = ∞)
        slope[i] = zn[i] / fr if finite else 0.0  # ζ/c
        bp[i] = fr / fx if finite else INF
    order = sort_order(bp, False, idx)
    for p in range(k):
        sorted_base[p] = base[order[p]]
    total = row_sum(sorted_base, k)
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
            y_sol = fmax(y_sol, y)
    feasible = y_sol > 0
    s = 1.0 / y_sol if feasible else INF
    for i in range(k):
        u[i] = fmin(fixed[c, i], s * free[c, i]) if on[i] and feasible else INF
    return s


@jit
def row_latency(u, d, on, row, p_bits, b_bits, work):  # type: ignore[no-untyped-def]
    """Lat(u) of one row (∞ if any scheduled u_k is not finite): d (K,) float δ (1 where δ = 0), row (6,)
    its terms a, c1, c2, c^F, c^B, Γ_f; ``work`` is scratch."""
    k = u.shape[0]
    a, c1, c2, stage_f, stage_b, floor = row
    z1 = -INF
    z2 = -INF
    finite = True
    for i in range(k):
        uu = u[i] if on[i] else 0.0
        work[i] = uu
        z1 = fmax(z1, uu)
        z2 = fmax(z2, d[i] * uu)
        finite = finite and math.isfinite(uu)
    if not finite:
        return INF
    link = p_bits * z1
    return (
        a * row_sum(work, k)
        + c1 * (fmax(stage_f, link) + fmax(stage_b, link))
        + c2 * fmax(floor, b_bits * z2)
    )
