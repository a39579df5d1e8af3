"""DSSDA's link step: bandwidth shares β and powers p of one cluster for fixed segments and micro-batches.

Rows are independent single-cluster problems (``cluster`` (R,) says whose devices), arrays (R, K). Write
each scheduled link's rate as r_k = β_k·W·ℓ(x_k), ℓ(x) = log2(1 + x), x_k = p_k·h_k/(β_k·W·N0) its SNR,
and u_k = 1/r_k. With weights w, v on the cluster's pipeline and gather times (1 for a lone cluster; the
cluster step chooses them when clusters are coupled through the maxima), the link-dependent cost is

    Lat(u) = a·Σ_k u_k + c1·[max(c^F, P·z1) + max(c^B, P·z1)] + c2·B·z2 + w·V·B·z2,
    z1 = max_k u_k,  z2 = max_k δ_k·u_k,  a = 2·w·V·I·P,  c1 = w·V·I·(M − 1),  c2 = v·V,
    c^F = max(c_F, max_k δ_k·a_k),  c^B = max(c_B, 2·max_k δ_k·a_k)

(c2·B·z2: the gather after the iterations; the last term: the redistribution's download of each device's
TEBs, part of the cluster's time R_n; the optimizer state of TEBs that change holder is left out here, and
counted where every candidate is scored)

plus the transmit energy Σ_k A_k·x_k/ℓ(x_k), A_k = Q_k·bits_k·N0/h_k, bits_k = 2·I·M·P + δ_k·B, which at a
fixed SNR does not depend on β. Two blocks alternate:

**Bandwidth (rate model r_k = c_k + d_k·β_k) — common latency targets.** c = 0, d = W·ℓ(x) for a link at
a fixed SNR (exact); the tangent of the concave rate β·W·ℓ(π_k/β) for a link held at full power. Lat is
convex in β. With targets z1, z2 and price μ = s² on Σ_k β_k ≤ 1 the KKT conditions give every device
u_k = min(F_k, s·min(κ1, κ2/δ_k, √(ζ_k/a))), ζ_k = 1/d_k: bound by the common link target, the common
gather target, or interior (water-filling). A free target with slope σ of its term has
κ² = Σ_B (ζ_k/m_k)/(σ + a·Σ_B m_k) over the devices B binding it (the longest self-consistent prefix by
ζ_k/m_k²; m_k = 1 for the link target, 1/δ_k for the gather target, min(1, δ*/δ_k) when the two are tied
at z2 = δ*·z1); the link target at a kink of its term (P·z1 = c^F or c^B) is a fixed bound F_k.
The budget Σ_k (1/u_k − c_k)·ζ_k = 1 fixes s in closed form (piecewise linear in 1/s). Every structure —
which devices bind which target (a threshold on δ, or a tie), each target's slope or kink — is a
candidate; the cheapest is the exact minimiser. Cost-tied candidates give a range [μ_lo, μ_hi] of prices.

**Power (fixed β) — first-order condition.** With Ω_k = μ/(d_k·u_k²) the marginal latency cost of link k,
the link minimises (Ω_k/(β_k·W) + A_k·x)/ℓ(x), quasi-convex in x:

    (1 + x)·ln(1 + x) − x = Ω_k/(β_k·W·A_k)

solved by Newton's method in ln(1 + x) from an upper bound, then clipped to x ≤ π_k/β_k, π_k =
p_max·h_k/(W·N0) (A_k = 0 gives full power). A degenerate bandwidth step leaves μ an interval: the power
step is tried at three prices across it (then zooming on the best), each followed by a bandwidth step.

Every iterate is scored exactly (Lat + transmit energy) and the best is kept. Without energy weights
every link sits at full power, so a round depends only on its starting β: a row whose β comes back
unchanged stops. Against the exact (log-barrier) allocation of ``optimal`` the gap is ~0.01 % on average.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from collapipe_core.costmodel.closed_form import gained_blocks, moved_blocks
from collapipe_core.costmodel.problem import RoundProblem
from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.scheduler.arrays import IntArray, indexed, quiet, take_last

PRICES = 3
_PRICE_STEPS = np.linspace(-0.5, 0.5, PRICES)  # the prices across the zoomed range (log scale)
NEWTON_STEPS = 40
_TIED_SLOPES = np.array([0.0, 1.0, 2.0])  # σ1 / (c1·P): below, between and above the stage kinks
_LINK_SLOPES = np.array([1.0, 2.0, 2.0])  # the link target alone is free only with a slope (2: padding)


@dataclass(frozen=True, eq=False)
class LinkTerms:
    """Per row the coefficients of Lat(u), arrays (R,)."""

    a: FloatArray  # weight of Σ_k u_k
    c1: FloatArray  # weight of the stage maxima
    c2: FloatArray  # weight of the gather maximum
    download: FloatArray  # weight of the redistribution's download B·z2 (the cluster's pipeline weight × V)
    stage_f: FloatArray  # c^F (− τ: the link stage is P·z1 + τ)
    stage_b: FloatArray  # c^B (− τ)
    p_bits: FloatArray  # P: the payload of a micro-batch at the row's M


def link_terms(
    pr: RoundProblem,
    delta: IntArray,
    micro: FloatArray,
    pipeline_weight: FloatArray,
    gather_weight: FloatArray,
) -> LinkTerms:
    """The terms of rows δ (R, K) of problem ``pr`` (device arrays (R, K)), M, w, v (R,). The link latency
    τ adds a constant to the stage maxima (max(c, P·z1 + τ) = τ + max(c − τ, P·z1)) and to Σ_k u_k's term:
    constants of a row, left out."""
    mc = pr.micro_costs(micro)
    x = np.max(np.where(delta > 0, delta * mc.compute_s, 0.0), axis=-1)
    stage_f = np.maximum(mc.chain_max_forward_s, x)
    stage_b = np.maximum(
        mc.chain_max_backward_s, np.max(np.where(delta > 0, mc.backward_s(delta), 0.0), axis=-1)
    )
    if pr.link_latency_s:
        stage_f = np.maximum(stage_f - pr.link_latency_s, 0.0)
        stage_b = np.maximum(stage_b - pr.link_latency_s, 0.0)
    return LinkTerms(
        a=2.0 * pipeline_weight * pr.V * pr.iterations * mc.payload_bits,
        c1=pipeline_weight * pr.V * pr.iterations * (micro - 1.0),
        c2=gather_weight * pr.V,
        download=pipeline_weight * pr.V,
        stage_f=stage_f,
        stage_b=stage_b,
        p_bits=np.broadcast_to(np.asarray(mc.payload_bits, dtype=np.float64), micro.shape),
    )


@dataclass(frozen=True, eq=False)
class _Rows:
    """The link problems of rows (device arrays (R, K)): the band W and a TEB's B (the problem's), the
    terms, δ, π_k (0 where δ = 0), the transmit-energy weights A_k and the download's reach δ'."""

    bandwidth_hz: float
    block_bits: float
    terms: LinkTerms
    delta: FloatArray
    pi: FloatArray
    weight: FloatArray
    reach: FloatArray

    def take(self, index: IntArray) -> _Rows:
        """Rows ``index`` (repeats allowed)."""
        arrays = (self.delta[index], self.pi[index], self.weight[index], self.reach[index])
        return _Rows(self.bandwidth_hz, self.block_bits, indexed(self.terms, index), *arrays)


@quiet
def allocate(
    pr: RoundProblem,
    cluster: IntArray,
    delta: IntArray,
    micro: IntArray,
    pipeline_weight: FloatArray,
    gather_weight: FloatArray,
    rounds: int = 3,
) -> tuple[FloatArray, FloatArray]:
    """β, p (R, K) of rows of single clusters (cluster (R,), δ (R, K), M, w, v (R,)), from equal shares at
    full power, by ``rounds`` rounds of the power and bandwidth steps (module docstring). The bandwidth
    steps see the redistribution's download at δ (the module docstring's Lat: its KKT structures have one
    maximum of δ_k·u_k, the gather's); every iterate is scored with it at
    δ'_k = δ_k + (in_k·B_opt + g_k·B_0)/B (the moved optimizer state and the frozen weights of gained TEBs
    it also sends), and the best is kept."""
    pr = pr.rows(cluster)
    m = np.asarray(micro, dtype=np.float64)
    terms = link_terms(pr, delta, m, pipeline_weight, gather_weight)
    into, _ = moved_blocks(pr, delta)
    gained = gained_blocks(pr, delta) if pr.frozen_bits else 0.0
    reach = delta + (into * pr.optimizer_bits + gained * pr.frozen_bits) / pr.block_bits
    d = delta.astype(np.float64)
    on = d > 0
    bits = 2.0 * pr.iterations * m[:, None] * terms.p_bits[:, None] + d * pr.block_bits
    weight = np.where(on, pr.queues * bits * pr.noise_w_per_hz / pr.gain, 0.0)
    pi = pr.max_power_w * pr.gain / (pr.bandwidth_hz * pr.noise_w_per_hz)  # SNR at p_max on the whole band
    lp = _Rows(pr.bandwidth_hz, pr.block_bits, terms, d, np.where(on, pi, 0.0), weight, reach)
    beta = np.where(on, 1.0 / np.maximum(on.sum(axis=-1, keepdims=True), 1), 0.0)
    x = _snr_limit(lp.pi, beta)
    best = [score(lp, beta, x), beta.copy(), x.copy()]  # each row's best score, β and x so far

    def keep(rows: IntArray, value: FloatArray) -> None:
        better = value < best[0][rows]
        for kept, new in zip(best, (value, beta[rows], x[rows]), strict=True):
            kept[rows[better]] = new[better]

    # the first bandwidth step; a link's SNR does not rise above its start (full power on the equal share)
    beta, new_x, slope, bracket, _ = _trial(lp, beta, x)
    x = np.minimum(x, new_x)
    keep(np.arange(x.shape[0]), score(lp, beta, x))
    prices = PRICES if np.any(weight > 0) else 1  # at full power every price gives the same step
    center, spread = np.zeros(bracket.shape[0]), np.ones(bracket.shape[0])
    active = np.arange(delta.shape[0])  # rows still moving
    for _ in range(rounds):
        state = (beta[active], x[active], slope[active], bracket[active], center[active], spread[active])
        new, value = _round(lp.take(active), state, prices)
        moved = np.any(new[0] != beta[active], axis=1)
        beta[active], x[active], slope[active], bracket[active], center[active], spread[active] = new
        keep(active, value)
        if prices == 1:  # at full power a row whose β repeats would repeat this round
            active = active[moved]
            if active.size == 0:
                break
    _, beta, x = best
    power = np.where(on, beta * pr.bandwidth_hz * pr.noise_w_per_hz * x / pr.gain, 0.0)
    return beta, np.minimum(power, pr.max_power_w)


def _round(
    lp: _Rows, state: tuple[FloatArray, ...], prices: int
) -> tuple[tuple[FloatArray, ...], FloatArray]:
    """One round for rows in ``state`` = (β, x, the rate model's slope d, the price range, the last price,
    the zoom): the power step at ``prices`` prices across the range, a bandwidth step after each, the
    best pair kept (of equal ones the first). A row whose range is one price (its prices coincide) is
    tried once. Returns the new state and its score."""
    beta, x, slope, bracket, center, spread = state
    if prices == 1:  # no energy weights (allocate): every link at full power, whatever the price
        t_beta, t_x, t_slope, t_bracket, t_value = _trial(lp, beta, _snr_limit(lp.pi, beta))
        return (t_beta, t_x, t_slope, t_bracket, center, spread), t_value
    rows = lp.delta.shape[0]
    mu = _price_levels(bracket, center, spread, prices)  # (R, P)
    tried = (np.arange(prices) == 0) | np.any(mu != mu[:, :1], axis=1, keepdims=True)  # (R, P)
    pairs = np.flatnonzero(tried)  # row·P + price, ascending
    row = pairs // prices
    on = lp.delta > 0
    rate = beta * lp.bandwidth_hz * np.log2(1.0 + x)
    marginal = np.where(on, rate**2 / np.where(on, slope, 1.0), 0.0)  # Ω = μ·r²/d = μ/(d·u²)
    omega = mu.reshape(-1)[pairs, None] * marginal[row]  # (pairs, K)
    wide = lp.take(row)
    trial_x = power_step(lp.bandwidth_hz, beta[row], omega, wide.weight, wide.pi)
    t_beta, t_x, t_slope, t_bracket, t_value = _trial(wide, beta[row], trial_x)
    value = np.full(rows * prices, np.inf)
    value[pairs] = t_value
    value = value.reshape(rows, prices)
    pick = np.argmin(value, axis=1)
    at = np.arange(rows)
    chosen = np.searchsorted(pairs, at * prices + pick)
    zoom = np.where(pick % (PRICES - 1) == 0, spread, spread / 3.0)  # zoom unless the pick is an end
    new = (t_beta[chosen], t_x[chosen], t_slope[chosen], t_bracket[chosen], mu[at, pick], zoom)
    return new, value[at, pick]


def _snr_limit(pi: FloatArray, beta: FloatArray) -> FloatArray:
    """The largest SNR full power allows on bandwidth share β: π_k/β_k (0 where β = 0)."""
    return np.where(beta > 0, pi / np.maximum(beta, 1e-300), 0.0)


def _trial(
    lp: _Rows, beta: FloatArray, x: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The bandwidth step at the SNRs x reached on β, links at full power kept there:
    (β', x', the rate model's slope d, the price range (R, 2), the score)."""
    delta, band = lp.delta, lp.bandwidth_hz
    on = delta > 0
    limit = _snr_limit(lp.pi, beta)
    at_max = on & (x >= limit * (1 - 1e-9))
    ell = np.log2(1.0 + np.maximum(x, 1e-300))
    tangent = band * (ell - x / ((1.0 + x) * np.log(2.0)))
    slope = np.where(on, np.where(at_max, tangent, band * ell), 1.0)
    intercept = np.where(at_max, beta * band * ell - tangent * beta, 0.0)
    new_beta, bracket = bandwidth_step(lp.terms, delta, intercept, slope, lp.block_bits)
    new_limit = _snr_limit(lp.pi, new_beta)
    new_x = np.minimum(np.where(at_max, new_limit, x), new_limit)
    return new_beta, new_x, slope, bracket, score(lp, new_beta, new_x)


@quiet
def score(lp: _Rows, beta: FloatArray, x: FloatArray) -> FloatArray:
    """Lat(u) + Σ_k A_k·x_k/ℓ(x_k) per row (∞ where a scheduled link has no rate); the download's maximum
    at the reach δ' (with moved optimizer state)."""
    on = lp.delta > 0
    ell = np.log2(1.0 + np.maximum(x, 1e-300))
    u = np.where(on, 1.0 / (np.maximum(beta, 1e-300) * lp.bandwidth_hz * ell), 0.0)
    energy = np.sum(np.where(on, lp.weight * x / ell, 0.0), axis=-1)
    value = latency_cost(lp.terms, lp.delta, u, lp.block_bits, lp.reach) + energy
    out: FloatArray = np.where(np.isfinite(value), value, np.inf)
    return out


def latency_cost(
    terms: LinkTerms,
    delta: FloatArray,
    u: FloatArray,
    b_bits: float,
    reach: FloatArray | None = None,
) -> FloatArray:
    """Lat(u) (R, ...) for u (R, ..., K) (0 where δ = 0) and ``terms`` of the rows (R,); the download's
    maximum at ``reach`` (δ' ≥ δ: with the moved optimizer state) where given, else at δ."""
    z1 = u.max(axis=-1)
    z2 = (delta * u).max(axis=-1)
    z2_down = z2 if reach is None else (reach * u).max(axis=-1)
    axes = (slice(None),) + (None,) * (z1.ndim - 1)  # the terms against u's leading axes
    a, c1, c2, download = terms.a[axes], terms.c1[axes], terms.c2[axes], terms.download[axes]
    link = terms.p_bits[axes] * z1
    value: FloatArray = (
        a * u.sum(axis=-1)
        + c1 * (np.maximum(terms.stage_f[axes], link) + np.maximum(terms.stage_b[axes], link))
        + c2 * b_bits * z2
        + download * b_bits * z2_down
    )
    return value


@quiet
def power_step(
    bandwidth_hz: float, beta: FloatArray, omega: FloatArray, weight: FloatArray, pi: FloatArray
) -> FloatArray:
    """SNR x per link from (1 + x)·ln(1 + x) − x = Ω/(β·W·A), clipped to π/β (full power where A = 0)."""
    limit = _snr_limit(pi, beta)
    solve = (pi > 0) & (weight > 0)
    x = limit.copy()
    y = omega[solve] / (np.maximum(beta[solve], 1e-300) * bandwidth_hz * weight[solve])
    x[solve] = np.minimum(solve_foc(np.minimum(y, 1e300)), limit[solve])
    return x


def solve_foc(y: FloatArray) -> FloatArray:
    """x ≥ 0 with (1 + x)·ln(1 + x) − x = y: Newton on w = ln(1 + x) from an upper bound (x ≤ √(3y) while
    x ≤ 1, else ln(1 + x) ≤ max(2, ln(1 + y)) + 1); each element until its step is below 1e-12·w."""
    y = np.maximum(y, 0.0)
    small = np.sqrt(3.0 * y)
    w = np.where(small <= 1.0, np.log1p(small), np.maximum(2.0, np.log1p(y)) + 1.0)
    active = np.arange(y.size)
    for _ in range(NEWTON_STEPS):
        wa, ya = w[active], y[active]
        ew = np.exp(wa)
        step = (ew * (wa - 1.0) + 1.0 - ya) / np.maximum(wa * ew, 1e-300)
        w[active] = np.maximum(wa - step, 0.0)
        active = active[np.abs(step) > 1e-12 * np.maximum(w[active], 1e-300)]
        if active.size == 0:
            break
    return np.expm1(w)


@quiet
def bandwidth_step(
    terms: LinkTerms,
    delta: FloatArray | IntArray,
    intercept: FloatArray,
    slope: FloatArray,
    b_bits: float,
) -> tuple[FloatArray, FloatArray]:
    """Exact β (R, K) for the rate model r_k = c_k + d_k·β_k and the price range [μ_lo, μ_hi] (R, 2).

    Only the scheduled devices take part (each row's are moved to the front)."""
    delta = np.asarray(delta, dtype=np.float64)
    rows_count, k = delta.shape
    keep = None
    if not np.all(delta > 0):
        order = np.argsort(delta <= 0, axis=1, kind="stable")
        width = max(int(np.max(np.sum(delta > 0, axis=1))), 1)
        keep = order[:, :width]  # (R, K') the scheduled devices first
        delta, intercept, slope = take_last(delta, keep), take_last(intercept, keep), take_last(slope, keep)
    on = delta > 0
    d = np.where(on, delta, 1.0)
    zeta = np.where(on, 1.0 / slope, 0.0)
    zn = zeta / (1.0 + np.sum(np.where(on, intercept * zeta, 0.0), axis=-1, keepdims=True))
    free, bounded, order = _structures(terms, on, d, zeta, b_bits)  # (R, C', K), (R, C'', K) ×2, (C,)
    parts = (_normalise_free(zn, on, free), _normalise(zn[:, None, :], on[:, None, :], *bounded))
    u, s = (np.concatenate(x, axis=1) for x in zip(*parts, strict=True))
    uu = np.where(on[:, None, :], u, 0.0)
    cost = latency_cost(terms, d[:, None, :], uu, b_bits)
    cost = np.where(np.all(np.isfinite(uu), axis=-1) & ~np.isnan(cost), cost, np.inf)[:, order]
    s = s[:, order]
    best = np.argmin(cost, axis=1)
    rows = np.arange(rows_count)
    beta = np.where(on, np.maximum(zeta / u[rows, order[best]] - intercept * zeta, 1e-9), 0.0)
    beta = beta / np.maximum(beta.sum(axis=-1, keepdims=True), 1.0)
    tied = (cost <= cost[rows, best][:, None] * (1 + 1e-9) + 1e-300) & np.isfinite(s)
    mu = s * s
    lo = np.min(np.where(tied, mu, np.inf), axis=1)
    hi = np.max(np.where(tied, mu, -np.inf), axis=1)
    lo = np.where(np.isfinite(lo), lo, 0.0)
    bracket = np.concatenate([lo[:, None], np.where(np.isfinite(hi), hi, lo)[:, None]], axis=1)
    if keep is None:
        return beta, bracket
    out = np.zeros((rows_count, k))
    np.put_along_axis(out, keep, beta, axis=1)
    return out, bracket


def _structures(
    terms: LinkTerms, on: BoolArray, d: FloatArray, zeta: FloatArray, b_bits: float
) -> tuple[FloatArray, tuple[FloatArray, FloatArray], IntArray]:
    """Every KKT structure's free factors c_k and fixed bounds F_k (∞: none), in two groups: those without
    a fixed bound (R, C', K) and those with (free, fixed) (R, C'', K); and the order (C,) that lists both
    groups' structures as the families below are listed (the order the cheapest structure is chosen in).

    Separate targets at a threshold t ∈ {0} ∪ {δ_k} (devices with δ ≤ t may bind the link target, the
    others the gather target): both free, or the link target at a kink with the gather target free. Tied
    targets z2 = δ*·z1 for δ* ∈ {δ_k}: free with slope σ1 + δ*·σ2, or at a kink of the link term. Every
    device is also capped by its interior value √(ζ_k/a). A row without a link term (c1 = 0) or a gather
    term has no target of that kind free (κ = ∞); its structures at a kink are feasible candidates that
    cost no less than the optimum. The link target free below both kinks (slope 0) or over no device
    (t = 0) is no structure of its own: it leaves every device interior, or the gather target alone."""
    rows, k = on.shape
    j, t = k + 1, k  # thresholds (0 and each device's δ), tied δ*
    p_bits = terms.p_bits
    link_slope, gather_slope = terms.c1 * p_bits, (terms.c2 + terms.download) * b_bits
    a = terms.a + 1e-12 * (link_slope + gather_slope) + 1e-300
    interior = np.where(on, np.sqrt(zeta / a[:, None]), np.inf)
    kink1 = (
        np.concatenate([terms.stage_f[:, None], terms.stage_b[:, None]], axis=1) / p_bits[:, None]
    )  # (R, 2)
    inv_d = 1.0 / d
    star = np.where(on, d, np.max(np.where(on, d, 1.0), axis=1, keepdims=True))  # δ* (R, T)
    m = np.minimum(1.0, star[:, :, None] * inv_d[:, None, :])  # (R, T, K)
    # the targets' κ in one batch of groups (3, R, J, S): the link target over the devices with δ ≤ t
    # (slopes 1, 2 and 2 again), the gather target over the others, the tied targets (J = T + 1: the last
    # group empty)
    side = np.zeros((3, rows, j, k), dtype=bool)
    side[0, :, 1:] = on[:, None, :] & (d[:, None, :] <= np.where(on, d, np.inf)[:, :, None])
    side[1] = on[:, None, :] & ~side[0]
    side[2, :, :t] = on[:, None, :]
    weight = np.ones((3, rows, j, k))
    weight[1] = inv_d[:, None, :]
    weight[2, :, :t] = m
    sigma = np.zeros((3, rows, j, 3))
    sigma[0] = link_slope[:, None, None] * _LINK_SLOPES
    sigma[1] = gather_slope[:, None, None]
    sigma[2, :, :t] = link_slope[:, None, None] * _TIED_SLOPES + star[..., None] * gather_slope[:, None, None]
    kappa = _kappa(
        np.concatenate([zeta, zeta, zeta]),
        weight.reshape(3 * rows, j, k),
        side.reshape(3 * rows, j, k),
        np.concatenate([terms.a, terms.a, terms.a]),
        sigma.reshape(3 * rows, j, 3),
    ).reshape(3, rows, j, 3)
    k1 = kappa[0, :, 1:, :2]  # (R, J − 1, 2)
    k2_dev = kappa[1, :, :, :1] * inv_d[:, None, :]  # κ2/δ_k (R, J, K)
    tied = kappa[2, :, :t]  # (R, T, 3)
    sizes = np.cumsum([1, 2 * (j - 1), j, 2 * (j - 1), 3 * t])
    free = np.empty((rows, int(sizes[-1]), k))
    free[:, 0] = np.inf  # every device interior
    free[:, 1 : sizes[1]] = k1.reshape(rows, -1)[..., None]  # link target free
    free[:, sizes[1] : sizes[2]] = k2_dev  # gather target free
    both = np.minimum(k1[..., None], k2_dev[:, 1:, None, :])  # both free (R, J − 1, 2, K)
    free[:, sizes[2] : sizes[3]] = both.reshape(rows, -1, k)
    free[:, sizes[3] :] = (m[:, :, None, :] * tied[..., None]).reshape(rows, -1, k)  # tied, free
    # the link target at a kink (2), tied at a kink (2·T), at a kink with the gather target free (2·J)
    bounded_free = np.empty((rows, 2 + 2 * t + 2 * j, k))
    bounded_fixed = np.empty(bounded_free.shape)
    bounded_free[:, : 2 + 2 * t] = np.inf
    bounded_free[:, 2 + 2 * t : 2 + 2 * t + j] = k2_dev
    bounded_free[:, 2 + 2 * t + j :] = k2_dev
    bounded_fixed[:, :2] = kink1[:, :, None]
    bounded_fixed[:, 2 : 2 + 2 * t] = (m[:, :, None, :] * kink1[:, None, :, None]).reshape(rows, -1, k)
    bounded_fixed[:, 2 + 2 * t : 2 + 2 * t + j] = kink1[:, :1, None]
    bounded_fixed[:, 2 + 2 * t + j :] = kink1[:, 1:, None]
    np.minimum(free, interior[:, None, :], out=free)
    np.minimum(bounded_free, interior[:, None, :], out=bounded_free)
    return free, (bounded_free, bounded_fixed), _family_order(j, t)


@functools.cache
def _family_order(j: int, t: int) -> IntArray:
    """Where each structure of the listed families sits in the two groups of :func:`_structures` (the
    free group first): every device interior, the link target free, at a kink, the gather target free,
    both free, the link target at a kink with the gather free, tied and free, tied at a kink."""
    free = np.cumsum([0, 1, 2 * (j - 1), j, 2 * (j - 1), 3 * t])
    bounded = free[-1] + np.cumsum([0, 2, 2 * t, 2 * j])
    ranges = [
        (free[0], free[1]),
        (free[1], free[2]),
        (bounded[0], bounded[1]),
        (free[2], free[3]),
        (free[3], free[4]),
        (bounded[2], bounded[3]),
        (free[4], free[5]),
        (bounded[1], bounded[2]),
    ]
    order: IntArray = np.concatenate([np.arange(lo, hi) for lo, hi in ranges])
    return order


def _normalise_free(zn: FloatArray, on: BoolArray, free: FloatArray) -> tuple[FloatArray, FloatArray]:
    """:func:`_normalise` of structures without fixed bounds (free (R, C, K), zn and on (R, K)): the budget
    Σ_k ζ_k/(s·c_k) = 1 gives 1/s = Σ_k ζ_k/c_k."""
    finite = on[:, None, :] & np.isfinite(free)
    rate = np.where(finite, zn[:, None, :] / np.where(finite, free, 1.0), 0.0)
    y = 1.0 / np.cumsum(rate, axis=-1)[..., -1]  # summed in device order, as _normalise does
    feasible = np.isfinite(y) & (y > 0)
    s = np.where(feasible, 1.0 / np.where(feasible, y, 1.0), np.inf)
    u = np.where(on[:, None, :] & feasible[..., None], s[..., None] * free, np.inf)
    return u, s


def _kappa(zeta: FloatArray, m: FloatArray, side: BoolArray, a: FloatArray, sigma: FloatArray) -> FloatArray:
    """κ (R, G, S) with κ² = Σ_B (ζ_k/m_k)/(σ + a·Σ_B m_k) over the devices B of each group (``side``,
    (R, G, K)) bound by a target of slope σ (R, G or 1, S): the devices sorted by ζ_k/m_k² (descending), B
    the longest prefix whose last device i meets ζ_i/m_i²·(σ + a·Σ_{≤i} m) ≥ a·Σ_{≤i} ζ/m (water-filling).
    ∞ where σ = 0 (no such target) or the group is empty."""
    mm = np.where(side, m, 1.0)
    key = np.where(side, zeta[:, None, :] / (mm * mm), 0.0)
    order = np.argsort(-key, axis=-1, kind="stable")
    key = take_last(key, order)[:, :, None, :]  # (R, G, 1, K)
    mm = take_last(mm, order)[:, :, None, :]
    valid = key > 0
    sum_zm = np.cumsum(np.where(valid, key * mm, 0.0), axis=-1)  # Σ ζ/m over the prefix
    sum_m = np.cumsum(np.where(valid, mm, 0.0), axis=-1)
    a4 = a[:, None, None, None]
    ok = valid & (key * (sigma[..., None] + a4 * sum_m) >= a4 * sum_zm * (1 - 1e-12))  # (R, G, S, K)
    last = np.maximum(ok.sum(axis=-1, keepdims=True) - 1, 0)
    num = take_last(sum_zm, last)[..., 0]
    den = take_last(sum_m, last)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.sqrt(num / (sigma + a[:, None, None] * den))
    return np.where(ok.any(axis=-1) & (sigma > 0), kappa, np.inf)


def _normalise(
    zn: FloatArray, on: BoolArray, free: FloatArray, fixed: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """u_k = min(F_k, s·c_k) with Σ_k ζ_k/u_k = 1 (ζ already divided by 1 + Σ c·ζ), and s (∞, u = ∞ where
    no s meets the budget). With y = 1/s the bandwidth Σ_k max(ζ_k/F_k, y·ζ_k/c_k) is piecewise linear and
    increasing; device k switches to its free bound at y = c_k/F_k."""
    finite = on & np.isfinite(free)
    base = np.where(on, zn / fixed, 0.0)
    rate = np.where(finite, zn / np.where(finite, free, 1.0), 0.0)
    switch = np.where(finite, free / fixed, np.inf)
    order = np.argsort(switch, axis=-1)
    switch = take_last(switch, order)
    base_sorted = take_last(base, order)
    lin = np.cumsum(take_last(rate, order), axis=-1)
    rest = base.sum(axis=-1, keepdims=True) - np.cumsum(base_sorted, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = (1.0 - rest) / lin
    following = np.concatenate([switch[..., 1:], np.full((*switch.shape[:-1], 1), np.inf)], axis=-1)
    valid = (lin > 0) & np.isfinite(switch) & (y >= switch * (1 - 1e-12)) & (y <= following * (1 + 1e-12))
    y_best = np.max(np.where(valid, y, -1.0), axis=-1)
    feasible = y_best > 0
    s = np.where(feasible, 1.0 / np.where(feasible, y_best, 1.0), np.inf)
    u = np.where(on & feasible[..., None], np.minimum(fixed, s[..., None] * free), np.inf)
    return u, s


def _price_levels(bracket: FloatArray, center: FloatArray, spread: FloatArray, prices: int) -> FloatArray:
    """``prices`` prices (R, P) in [μ_lo, μ_hi]: spread over it (log scale) at first, then zooming on the
    last pick (``spread`` shrinks by 3 each time the pick was not an end)."""
    lo, hi = bracket[:, 0], bracket[:, 1]
    lo_safe = np.maximum(lo, 1e-300)
    top = np.log(np.maximum(hi, lo_safe))
    width = (top - np.log(lo_safe)) * np.minimum(spread, 1.0)
    mid = np.where(
        center > 0,
        np.log(np.minimum(np.maximum(center, lo_safe), np.exp(top))),
        np.log(lo_safe) + 0.5 * width,
    )
    frac = _PRICE_STEPS[:prices]
    levels = np.exp(
        np.minimum(np.maximum(mid[:, None] + width[:, None] * frac, np.log(lo_safe)[:, None]), top[:, None])
    )
    return np.where(lo[:, None] > 0, levels, 0.0)
