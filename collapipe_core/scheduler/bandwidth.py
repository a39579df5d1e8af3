"""The bandwidth step of DSSDA's link allocation: exact β for a fixed rate model, by KKT structures.

Each scheduled link's rate is modelled as r_k = c_k + d_k·β_k (c = 0, d = W·log2(1 + x_k) at a fixed SNR;
the tangent of the concave rate for a link at p_max) and u_k = 1/r_k. The link-dependent latency of a
cluster is

    Lat(u) = a·Σ_k u_k + c1·[max(c^F, P·z1) + max(c^B, P·z1)] + c2·max(Γ_f, B·z2),
    z1 = max_k u_k,  z2 = max_k δ_k·u_k,

convex in β. With common targets z1 (link) and z2 (gather) and bandwidth price μ = s², the KKT
conditions give u_k = s·min(κ1, κ2/δ_k, √(ζ_k/a)), ζ_k = 1/d_k: every device is bound by the link
target, by the gather target, or interior (water-filling). A free target with slope σ of its term has
κ² = Σ_B (ζ_k/m_k)/(σ + a·Σ_B m_k) over the devices B binding it (the longest self-consistent prefix
by ζ_k/m_k²; m_k = 1 for the link target, 1/δ_k for the gather target, min(1, δ*/δ_k) when the two are
tied at ratio δ*); a target can also sit at a kink of its term. The budget Σ_k (1/u_k − c_k)/d_k = 1
fixes s in closed form. Every structure is a candidate, and the cheapest is the exact minimiser.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.scheduler.problem import IntArray, RoundProblem, quiet, row_offsets, take_last

_INF = np.inf


@dataclass(frozen=True, eq=False)
class ClusterTerms:
    """Per (batch, cluster) coefficients of the link-dependent cost, arrays of shape (..., N)."""

    a: FloatArray  # weight of Σ_k u_k
    c1: FloatArray  # weight of the stage maxima
    c2: FloatArray  # weight of the gather maximum
    stage_f: FloatArray  # c^F = max(c_F, max_k δ_k·a_k)
    stage_b: FloatArray  # c^B = max(c_B, 2·max_k δ_k·a_k)
    gather_floor: FloatArray  # Γ_f, seconds


def cluster_terms(
    pr: RoundProblem,
    delta: IntArray,
    micro: FloatArray,
    pipeline_weight: FloatArray,
    gather_weight: FloatArray,
    gather_floor: FloatArray,
) -> ClusterTerms:
    x = np.where(delta > 0, delta * pr.compute_s, 0.0).max(axis=-1)
    return ClusterTerms(
        a=2.0 * pipeline_weight * pr.V * pr.iterations * pr.payload_bits,
        c1=pipeline_weight * pr.V * pr.iterations * (micro - 1.0),
        c2=gather_weight * pr.V,
        stage_f=np.maximum(pr.chain_max_forward_s, x),
        stage_b=np.maximum(pr.chain_max_backward_s, 2.0 * x),
        gather_floor=gather_floor,
    )


def latency_cost(pr: RoundProblem, terms: ClusterTerms, delta: IntArray, u: FloatArray) -> FloatArray:
    """Lat(u) for u (..., N, K) (ignored where δ = 0), shape (..., N)."""
    on = delta > 0
    uu = np.where(on, u, 0.0)
    z1 = uu.max(axis=-1)
    z2 = (delta * uu).max(axis=-1)
    link = pr.payload_bits * z1
    cost = (
        terms.a * uu.sum(axis=-1)
        + terms.c1 * (np.maximum(terms.stage_f, link) + np.maximum(terms.stage_b, link))
        + terms.c2 * np.maximum(terms.gather_floor, pr.block_bits * z2)
    )
    return np.asarray(cost, dtype=np.float64)


@quiet
def bandwidth_step(
    pr: RoundProblem,
    terms: ClusterTerms,
    delta: IntArray,
    intercept: FloatArray,
    slope: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """Exact β for the rate model r_k = c_k + d_k·β_k (..., N, K); returns (β, [μ_lo, μ_hi] (..., N, 2)).

    A link at a fixed SNR x has c = 0, d = W·ℓ(x) (exact); a link held at p_max has the tangent of its
    concave rate at the current β. Several structures can reach the same minimum (one device, ties,
    kinks), each with its own price: the range of the cost-tied candidates' prices is returned.
    """
    lead = delta.shape[:-1]
    k = delta.shape[-1]
    rows = int(np.prod(lead)) if lead else 1
    on = (delta > 0).reshape(rows, k)
    d = np.where(on, delta.reshape(rows, k), 1).astype(np.float64)
    z = np.where(on, 1.0 / np.where(on, slope.reshape(rows, k), 1.0), 0.0)  # ζ = 1/d_k
    extra = 1.0 + np.sum(np.where(on, intercept.reshape(rows, k) * z, 0.0), axis=1)  # 1 + Σ c/d
    a, c1, c2, stage_f, stage_b, floor = (
        _flat(np.asarray(x), lead, rows)
        for x in (terms.a, terms.c1, terms.c2, terms.stage_f, terms.stage_b, terms.gather_floor)
    )
    free, fixed = _candidates(z, d, on, a, c1, c2, stage_f, stage_b, floor, pr.payload_bits, pr.block_bits)
    u, s = _normalise(z[:, None, :] / extra[:, None, None], free, fixed, on[:, None, :])
    cost = _cost(
        u, d[:, None, :], on[:, None, :], a, c1, c2, stage_f, stage_b, floor, pr.payload_bits, pr.block_bits
    )
    best = np.argmin(cost, axis=1)
    pick = np.arange(rows)
    u_best = u[pick, best]
    beta = np.where(on, z / np.where(on, u_best, 1.0) - intercept.reshape(rows, k) * z, 0.0)
    beta = np.where(on, np.maximum(beta, 1e-9), 0.0)
    beta = beta / np.maximum(beta.sum(axis=1, keepdims=True), 1.0)  # guard rounding above 1
    low = cost[pick, best]
    tied = np.isfinite(s) & (cost <= low[:, None] * (1 + 1e-9) + 1e-300)
    mu = s**2
    lo = np.min(np.where(tied, mu, np.inf), axis=1)
    hi = np.max(np.where(tied, mu, -np.inf), axis=1)
    lo = np.where(np.isfinite(lo), lo, 0.0)
    hi = np.where(np.isfinite(hi), hi, lo)
    return beta.reshape(delta.shape), np.stack([lo, hi], axis=-1).reshape((*lead, 2))


def _candidates(
    z: FloatArray,
    d: FloatArray,
    on: BoolArray,
    a: FloatArray,
    c1: FloatArray,
    c2: FloatArray,
    stage_f: FloatArray,
    stage_b: FloatArray,
    floor: FloatArray,
    p_bits: float,
    b_bits: float,
) -> tuple[FloatArray, FloatArray]:
    """Per-device free factors c_k and fixed bounds F_k (R, C, K) of every KKT structure.

    (A) separate targets: devices with δ ≤ threshold bind the link target z1 = s·κ1 (slope σ1 of its
        term, or z1 at a kink), the others the gather target z2 = s·κ2 (slope σ2, or at its kink);
    (B) tied targets at ratio z2/z1 = δ* (a device value): one target z1 = s·κ with bounds
        m_k·z1, m_k = min(1, δ*/δ_k), and slope σ1 + δ*·σ2 (or z1 at a kink of either term).
    Every device is also capped by its interior (water-filling) value s·√(ζ_k/a).

    The families are written into two preallocated (R, C, K) arrays, block by block along C (in the
    order listed in the body; a free factor of ∞ is a structure without a free target, a fixed bound
    of ∞ one without a kink): a few numpy calls per family on the solvers' small arrays.
    """
    rows, k = z.shape
    a_eff = a + 1e-12 * (c1 * p_bits + c2 * b_bits) + 1e-300
    interior = np.where(on, np.sqrt(z / a_eff[:, None]), _INF)[:, None, :]  # (R, 1, K)
    distinct = _distinct(np.where(on, d, 0.0))  # (R, U) the rows' distinct δ values (padded)
    # (A) thresholds 0 and every distinct δ
    thr = np.concatenate([np.zeros((rows, 1)), distinct], axis=1)  # (R, J)
    link_side = (d[:, None, :] <= thr[:, :, None]) & on[:, None, :]
    gather_side = ~link_side & on[:, None, :]
    j = thr.shape[1]
    star = distinct  # (R, U)
    u = star.shape[1]
    m = np.minimum(1.0, star[:, :, None] / d[:, None, :])  # (R, K*, K)
    link_slope, gather_slope = c1 * p_bits, c2 * b_bits
    # (R, K*, 5): σ1 + δ*·σ2 for σ1 ∈ {0, c1P, 2c1P}, σ2 ∈ {0, c2B}, except both zero
    tied_slopes = (link_slope[:, None] * _TIED_LINK)[:, None, :] + star[:, :, None] * (
        gather_slope[:, None] * _TIED_GATHER
    )[:, None, :]
    k1, k2, kt = _kappa_groups(z, on, d, link_side, gather_side, m, link_slope, gather_slope, a, tied_slopes)
    kink1 = np.stack([stage_f / p_bits, stage_b / p_bits], axis=1)[:, :, None]  # (R, 2, 1)
    kink2 = (floor / b_bits)[:, None, None]  # (R, 1, 1)
    dd = d[:, None, :]  # (R, 1, K)
    # blocks along C: free × free (J·3·2), link kink × free gather (2·J·2), free link × gather kink
    # (J·3), both at kinks (2), tied (U·5), tied at a kink (U·3)
    ends = np.cumsum([0, 6 * j, 4 * j, 3 * j, 2, 5 * u, 3 * u])
    free = np.empty((rows, int(ends[-1]), k))
    fixed = np.empty(free.shape)
    b0, b1, b2, b3, b4, b5, b6 = (int(e) for e in ends)
    # (A) free × free: min(κ1[j, σ1], κ2[j, σ2]/δ_k), ordered (j, σ1, σ2)
    both_free = np.minimum(k1[:, :, :, None, None], k2[:, :, None, :, None] / dd[:, :, None, None])
    free[:, b0:b1] = both_free.reshape(rows, b1 - b0, k)
    fixed[:, b0:b1] = _INF
    # (A) link at a kink × free gather target, ordered (kink, j, σ2)
    free[:, b1:b2].reshape(rows, 2, 2 * j, k)[...] = k2.reshape(rows, 1, -1)[:, :, :, None] / dd[:, None]
    fixed[:, b1:b2].reshape(rows, 2, 2 * j, k)[...] = kink1[:, :, None, :]
    # (A) free link target × gather at its kink, ordered (j, σ1)
    free[:, b2:b3] = k1.reshape(rows, -1, 1)
    fixed[:, b2:b3] = kink2 / dd
    # (A) both at kinks
    free[:, b3:b4] = _INF
    fixed[:, b3:b4] = np.minimum(kink1, kink2 / dd)
    # (B) tied at δ* = each distinct δ, ordered (δ*, slope)
    free[:, b4:b5].reshape(rows, u, 5, k)[...] = m[:, :, None, :] * kt[:, :, :, None]
    fixed[:, b4:b5] = _INF
    # (B) tied, at a kink of the link term (two) or of the gather term, ordered (δ*, kink)
    free[:, b5:b6] = _INF
    tied_kinks = fixed[:, b5:b6].reshape(rows, u, 3, k)
    tied_kinks[:, :, :2] = m[:, :, None, :] * kink1[:, None, :, :]
    tied_kinks[:, :, 2] = m * (kink2 / star[:, :, None])
    np.minimum(free, interior, out=free)
    return free, fixed


def _flat(x: FloatArray, lead: tuple[int, ...], rows: int) -> FloatArray:
    """A per-(batch, cluster) term as a flat (rows,) array."""
    return x.reshape(rows) if x.shape == lead else np.broadcast_to(x, lead).reshape(rows)


def _distinct(values: FloatArray) -> FloatArray:
    """The distinct positive values of each row, ascending, padded with the row's largest."""
    v = np.sort(values, axis=1)
    new = (v > 0) & np.concatenate([np.ones((v.shape[0], 1), dtype=bool), v[:, 1:] != v[:, :-1]], axis=1)
    width = max(int(new.sum(axis=1).max()), 1)
    compact = np.sort(np.where(new, v, np.inf), axis=1)[:, :width]
    return np.where(np.isfinite(compact), compact, v[:, -1:])


def _kappa_groups(
    z: FloatArray,
    on: BoolArray,
    d: FloatArray,
    link_side: BoolArray,
    gather_side: BoolArray,
    m_tied: FloatArray,
    link_slope: FloatArray,
    gather_slope: FloatArray,
    a: FloatArray,
    tied_slopes: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """κ of the three target families in one :func:`_kappa_per_row` call (groups stacked, slopes padded).

    Returns the link targets (R, J, 3) of slopes σ1 ∈ {0, c1·P, 2·c1·P} over ``link_side`` (m = 1), the
    gather targets (R, J, 2) of slopes σ2 ∈ {0, c2·B} over ``gather_side`` (m = 1/δ), the tied targets
    (R, U, 5) with ``m_tied`` over every scheduled device. Each (row, group, slope) is computed on its
    own, so the values are those of separate calls; a zero slope gives κ = ∞ (a term without that
    target), and the padding slopes' κ are discarded."""
    rows, j, k = link_side.shape
    u = m_tied.shape[1]
    if rows * (2 * j + u) * k > MERGE_KAPPA_ELEMENTS:  # large batches: three calls, no padded slopes
        return (
            _kappa_per_row(z, np.ones((rows, j, k)), link_side, a, link_slope[:, None, None] * _LINK[:3]),
            _kappa_per_row(
                z,
                np.repeat((1.0 / d)[:, None, :], j, axis=1),
                gather_side,
                a,
                gather_slope[:, None, None] * _GATHER[:2],
            ),
            _kappa_per_row(z, m_tied, np.repeat(on[:, None, :], u, axis=1), a, tied_slopes),
        )
    m = np.concatenate([np.ones((rows, j, k)), np.repeat((1.0 / d)[:, None, :], j, axis=1), m_tied], axis=1)
    side = np.concatenate([link_side, gather_side, np.repeat(on[:, None, :], u, axis=1)], axis=1)
    sep = np.concatenate([link_slope[:, None] * _LINK, gather_slope[:, None] * _GATHER], axis=1)
    slopes = np.concatenate([np.repeat(sep.reshape(rows, 2, 5), j, axis=1), tied_slopes], axis=1)
    kappa = _kappa_per_row(z, m, side, a, slopes)
    return kappa[:, :j, :3], kappa[:, j : 2 * j, :2], kappa[:, 2 * j :]


# above this many (row, group, device) elements the families are solved separately: merged, the padded
# slopes cost more arithmetic than the saved numpy calls (the values are the same either way)
MERGE_KAPPA_ELEMENTS = 20_000
# slope multipliers of the κ families (see _kappa_groups; the separate families padded to five)
_LINK = np.array([0.0, 1.0, 2.0, 1.0, 1.0])
_GATHER = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
_TIED_LINK = np.array([0.0, 1.0, 1.0, 2.0, 2.0])
_TIED_GATHER = np.array([1.0, 0.0, 1.0, 0.0, 1.0])


def _kappa_per_row(
    z: FloatArray, m: FloatArray, side: BoolArray, a: FloatArray, slopes: FloatArray
) -> FloatArray:
    """κ with κ² = Σ_B (ζ_k/m_k) / (σ + a·Σ_B m_k) over the binding set B of each group.

    Devices of a group (mask ``side``) bound by m_k·z share a target z = s·κ with slope σ; B is the
    longest prefix by ζ_k/m_k² (descending) with ζ_i/m_i²·(σ + a·Σ_{≤i} m) ≥ a·Σ_{≤i} ζ/m — the
    water-filling consistency condition, true exactly on a prefix. z (R, K), m/side (R, G, K),
    slopes (R, G, S) → κ (R, G, S); ∞ when σ = 0 or the group is empty.
    """
    mm = np.where(side, m, 1.0)
    key = np.where(side, z[:, None, :] / (mm * mm), 0.0)
    order = np.argsort(-key, axis=2)
    ks = take_last(key, order)
    ms = take_last(mm, order)
    zm = np.where(ks > 0, ks * ms, 0.0)  # ζ/m
    mw = np.where(ks > 0, ms, 0.0)
    c_zm = np.cumsum(zm, axis=2)[..., None]
    c_m = np.cumsum(mw, axis=2)[..., None]
    sig = slopes[:, :, None, :]
    aa = a[:, None, None, None]
    ok = (ks[..., None] > 0) & (ks[..., None] * (sig + aa * c_m) >= aa * c_zm * (1 - 1e-12))
    last = ok.sum(axis=2)  # (R, G, S)
    idx = np.maximum(last - 1, 0)
    num = take_last(c_zm[..., 0], idx)
    den = take_last(c_m[..., 0], idx)
    k2 = num / (slopes + a[:, None, None] * den)
    return np.where((last > 0) & (slopes > 0), np.sqrt(k2), _INF)


def _normalise(
    z: FloatArray, free: FloatArray, fixed: FloatArray, on: BoolArray
) -> tuple[FloatArray, FloatArray]:
    """u_k = min(F_k, s·c_k) with Σ ζ_k/u_k = 1: returns (u, s); s = ∞ and u = ∞ when infeasible.

    With y = 1/s the bandwidth Σ_k max(ζ_k/F_k, y·ζ_k/c_k) is piecewise linear and increasing; device k
    switches to its free bound at y = c_k/F_k. After sorting the switch points, the piece with the first
    i devices switched gives y = (1 − Σ_{>i} ζ/F)/Σ_{≤i} ζ/c, valid if it lies between its switch points.
    """
    finite = on & np.isfinite(free)
    base = np.where(on, z / fixed, 0.0)  # ζ/F (0 when F = ∞)
    slope = np.where(finite, z / free, 0.0)  # ζ/c
    bp = np.where(finite, free / fixed, _INF)
    flat = np.argsort(bp, axis=-1) + row_offsets(bp.shape[:-1], bp.shape[-1])  # one sort, three gathers
    bps = bp.reshape(-1)[flat]
    base_s = base.reshape(-1)[flat]
    lin = np.cumsum(slope.reshape(-1)[flat], axis=-1)
    rest = base_s.sum(axis=-1, keepdims=True) - np.cumsum(base_s, axis=-1)
    y = (1.0 - rest) / lin
    valid = (lin > 0) & (y >= bps * (1 - 1e-12)) & np.isfinite(bps)
    valid[..., :-1] &= y[..., :-1] <= bps[..., 1:] * (1 + 1e-12)  # below the next switch point (last: ∞)
    y_sol = np.max(np.where(valid, y, -1.0), axis=-1)
    feasible = y_sol > 0
    s = np.where(feasible, 1.0 / np.where(feasible, y_sol, 1.0), _INF)
    u = np.where(on & feasible[..., None], np.minimum(fixed, s[..., None] * free), _INF)
    return u, s


def _cost(
    u: FloatArray,
    d: FloatArray,
    on: BoolArray,
    a: FloatArray,
    c1: FloatArray,
    c2: FloatArray,
    stage_f: FloatArray,
    stage_b: FloatArray,
    floor: FloatArray,
    p_bits: float,
    b_bits: float,
) -> FloatArray:
    uu = np.where(on, u, 0.0)
    z1 = uu.max(axis=-1)
    z2 = (d * uu).max(axis=-1)
    link = p_bits * z1
    cost = (
        a[:, None] * uu.sum(axis=-1)
        + c1[:, None] * (np.maximum(stage_f[:, None], link) + np.maximum(stage_b[:, None], link))
        + c2[:, None] * np.maximum(floor[:, None], b_bits * z2)
    )
    return np.where(np.isfinite(uu).all(axis=-1), cost, _INF)
