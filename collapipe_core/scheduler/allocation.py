"""DSSDA's link allocation for fixed segments and micro-batches: bandwidth and power, block by block.

Write each scheduled link's rate as r_k = β_k·W·ℓ(x_k), ℓ(x) = log2(1 + x), with x_k = p_k·h_k/(β_k·W·N0)
its SNR, and u_k = 1/r_k = ζ_k/β_k with ζ_k = 1/(W·ℓ(x_k)). The link-dependent part of a cluster's cost is

    Lat(u) = a·Σ_k u_k + c1·[max(c^F, P·z1) + max(c^B, P·z1)] + c2·max(Γ_f, B·z2),
    z1 = max_k u_k,  z2 = max_k δ_k·u_k,     a = 2·w·V·I·P,  c1 = w·V·I·(M − 1),  c2 = v·V,

plus the transmit energy Σ_k A_k·x_k/ℓ(x_k) with A_k = Q_k·bits_k·N0/h_k (bits_k = 2·I·M·P + δ_k·B): at a
fixed SNR the energy does not depend on β. (w, v are the cluster's weights on the pipeline and gather
maxima across clusters, 1 for a single cluster; Γ_f is the largest gather time of the other clusters.)

**Bandwidth (fixed SNRs) — common latency targets.** Lat is convex in β. With targets z1 (link) and
z2 (gather) and bandwidth price μ = s², the KKT conditions give every device u_k = s·min(κ1, κ2/δ_k,
√(ζ_k/a)): bound by the common link target, by the common gather target, or interior (water-filling).
For a free target with slope σ1 of its term, κ1² = Σ_{B1} ζ_k / (σ1 + a·|B1|) over the devices B1 that
bind it (the longest prefix by ζ that is self-consistent, as in water-filling), and likewise
κ2² = Σ_{B2} ζ_k·δ_k / (σ2 + a·Σ_{B2} 1/δ_k); a target can also sit at a kink of its term
(P·z1 = c^F or c^B, B·z2 = Γ_f). The bandwidth Σ_k ζ_k/u_k = 1 fixes s (piecewise linear in 1/s:
closed form after sorting). Every structure — which devices bind which target (a threshold on δ),
each target's slope or kink — is a candidate; the cheapest candidate is the exact minimiser.

**Power (fixed β) — first-order condition.** With Ω_k = μ·ζ_k/u_k² the marginal latency cost of link k
(from the bandwidth step's KKT), the link minimises (Ω_k/(β_k·W) + A_k·x)/ℓ(x) — its (V + Q_k)-weighted
cost per bit, quasi-convex in x. Setting the derivative to zero:

    (1 + x)·ln(1 + x) − x = Ω_k / (β_k·W·A_k),

solved by Newton's method in ln(1 + x); then x is clipped to the power limit x ≤ p_max·h_k/(β_k·W·N0)
(A_k = 0 gives p_max; when no link of the batch has an energy weight, Newton's method is not run).
p_k = β_k·W·N0·x_k/h_k.

The two blocks alternate; every iterate is scored exactly and the best is kept. Without energy weights
every link sits at p_max, so a round depends only on the β it starts from: a batch (or, for rows of single
clusters, a row) whose β comes back unchanged stops, since its further rounds would repeat the last one.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.scheduler.bandwidth import ClusterTerms, bandwidth_step, cluster_terms, latency_cost
from collapipe_core.scheduler.problem import IntArray, RoundProblem, quiet

__all__ = ["ClusterTerms", "allocate_links", "bandwidth_step", "cluster_terms", "power_step", "solve_foc"]

_INF = np.inf


def energy_weights(pr: RoundProblem, delta: IntArray, micro: FloatArray) -> FloatArray:
    """A_k = Q_k·bits_k·N0/h_k: the transmit energy's weight on x/ℓ(x)."""
    bits = 2.0 * pr.iterations * micro[..., None] * pr.payload_bits + delta * pr.block_bits
    return np.where(delta > 0, pr.queues * bits * pr.noise_w_per_hz / pr.gain, 0.0)


@quiet
def snr_limit(pr: RoundProblem, beta: FloatArray) -> FloatArray:
    """The largest SNR p_max allows on bandwidth share β."""
    return np.where(
        beta > 0,
        pr.max_power_w * pr.gain / (np.maximum(beta, 1e-300) * pr.bandwidth_hz * pr.noise_w_per_hz),
        0.0,
    )


@quiet
def power_step(
    pr: RoundProblem, beta: FloatArray, omega: FloatArray, energy_weight: FloatArray, on: BoolArray
) -> FloatArray:
    """SNR x per link from (1 + x)·ln(1 + x) − x = Ω/(β·W·A), clipped to the power limit."""
    limit = snr_limit(pr, beta)
    y = np.where(
        on & (energy_weight > 0),
        omega / (np.maximum(beta, 1e-300) * pr.bandwidth_hz * energy_weight),
        _INF,
    )
    finite = np.isfinite(y)
    if not finite.any():  # no link with an energy weight: every SNR at its limit, Newton not needed
        return np.where(on, limit, 0.0)
    x = solve_foc(np.minimum(y, 1e300))
    return np.where(on, np.where(finite, np.minimum(x, limit), limit), 0.0)


def solve_foc(y: FloatArray) -> FloatArray:
    """x ≥ 0 with (1 + x)·ln(1 + x) − x = y: Newton on w = ln(1 + x), from an upper bound."""
    y = np.maximum(y, 0.0)
    small = np.sqrt(3.0 * y)  # x ≤ √(3y) while x ≤ 1
    w = np.where(small <= 1.0, np.log1p(small), np.maximum(2.0, np.log1p(y)) + 1.0)
    for _ in range(40):
        ew = np.exp(w)
        step = (ew * (w - 1.0) + 1.0 - y) / np.maximum(w * ew, 1e-300)
        w = np.maximum(w - step, 0.0)
        if (np.abs(step) <= 1e-12 * np.maximum(w, 1e-300)).all():
            break
    return np.expm1(w)


@quiet
def allocate_links(
    pr: RoundProblem, delta: IntArray, micro: FloatArray, terms: ClusterTerms, rounds: int = 4
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """β, p (..., N, K) for fixed δ, M by alternating the bandwidth and power steps; also the score.

    Each round: the bandwidth step at the current SNRs gives β and the candidate prices μ; the power
    step runs once per price, the bandwidth step is re-solved at each resulting SNR vector, and the
    pair with the lowest score Lat(u) + Σ_k A_k·x_k/ℓ(x_k) (the cluster's link-dependent cost)
    continues. The best pair seen is returned. Starts from equal shares at p_max.
    """
    on = delta > 0
    weight = energy_weights(pr, delta, micro)
    count = np.maximum(on.sum(axis=-1, keepdims=True), 1)
    beta = np.where(on, 1.0 / count, 0.0)
    x = snr_limit(pr, beta)
    best_beta, best_x = beta, x
    best = _score(pr, terms, delta, beta, x, weight)
    wide = _expand(terms)
    # candidate prices run along a new axis just before the cluster axis: (..., prices, N, K)
    on_w, delta_w, weight_w = on[..., None, :, :], delta[..., None, :, :], weight[..., None, :, :]
    center = np.zeros(best.shape)
    spread = np.ones(best.shape)
    c, d = _rate_model(pr, beta, x, on)
    beta, bracket = bandwidth_step(pr, terms, delta, c, d)
    x = np.minimum(x, snr_limit(pr, beta))
    if not np.any(weight > 0) and delta.ndim == 2 and pr.shape[0] == delta.shape[0]:
        best, best_beta, best_x = _rounds_at_max_power(
            pr, terms, delta, weight, beta, (best, best_beta, best_x), rounds
        )
        rounds = 0
    # with no energy weight anywhere the power step is p_max at every price: the lowest price stands
    # for all of them (the same pick, centre and spread as PRICES identical trials)
    prices = PRICES if np.any(weight > 0) else 1
    for _ in range(rounds):
        start = beta
        mu = _price_levels(bracket, center, spread, prices)  # (..., N, P)
        rate = beta * pr.bandwidth_hz * np.log2(1.0 + x)
        marginal = np.where(on, rate**2 / np.where(on, d, 1.0), 0.0)  # 1/(d·u²)
        omega = np.moveaxis(mu, -1, -2)[..., None] * marginal[..., None, :, :]
        beta_w = np.broadcast_to(beta[..., None, :, :], omega.shape)
        trial_x = power_step(pr, beta_w, omega, weight_w, on_w)
        trial_beta, trial_x, trial, td, trial_bracket = _trial(
            pr, wide, np.broadcast_to(delta_w, omega.shape), beta_w, trial_x, weight_w
        )  # (..., P, N, K), trial (..., P, N)
        pick = np.argmin(trial, axis=-2)  # (..., N)
        # the picked price's figures: a one-hot mask over the price axis (exact: one term, the rest 0)
        chosen = np.arange(trial.shape[-2])[:, None] == pick[..., None, :]  # (..., P, N)
        wide_chosen = chosen[..., None]
        beta = np.where(wide_chosen, trial_beta, 0.0).sum(axis=-3)
        x = np.where(wide_chosen, trial_x, 0.0).sum(axis=-3)
        d = np.where(wide_chosen, td, 0.0).sum(axis=-3)
        bracket = np.where(wide_chosen, trial_bracket, 0.0).sum(axis=-3)
        score = np.min(trial, axis=-2)
        center = np.where(np.swapaxes(chosen, -1, -2), mu, 0.0).sum(axis=-1)
        spread = np.where(pick % (PRICES - 1) == 0, spread, spread / 3.0)  # zoom unless at an end
        better = score < best
        best = np.where(better, score, best)
        best_beta = np.where(better[..., None], beta, best_beta)
        best_x = np.where(better[..., None], x, best_x)
        if prices == 1 and np.array_equal(beta, start):
            break  # a round starting from the same β again would repeat this one (see _rounds_at_max_power)
    power = np.where(on, best_beta * pr.bandwidth_hz * pr.noise_w_per_hz * best_x / pr.gain, 0.0)
    return best_beta, np.minimum(power, pr.max_power_w), best


PRICES = 3


def _trial(
    pr: RoundProblem,
    terms: ClusterTerms,
    delta: IntArray,
    beta: FloatArray,
    x: FloatArray,
    weight: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The bandwidth step at the SNRs x reached on β, x held at the power limit where it was there:
    (β', x', score, d of the rate model, price bracket)."""
    on = delta > 0
    limit = snr_limit(pr, beta)
    tc, td = _rate_model(pr, beta, x, on)
    new_beta, bracket = bandwidth_step(pr, terms, delta, tc, td)
    new_limit = snr_limit(pr, new_beta)
    new_x = np.minimum(np.where(x >= limit * (1 - 1e-9), new_limit, x), new_limit)
    return new_beta, new_x, _score(pr, terms, delta, new_beta, new_x, weight), td, bracket


def _rounds_at_max_power(
    pr: RoundProblem,
    terms: ClusterTerms,
    delta: IntArray,
    weight: FloatArray,
    beta: FloatArray,
    best: tuple[FloatArray, FloatArray, FloatArray],
    rounds: int,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The rounds of :func:`allocate_links` for rows (R, K) of single clusters without energy weights.

    Every link then sits at p_max whatever the price, so a round maps the β it starts from to the next
    β, its SNRs and score, and nothing else: a row whose β comes back unchanged would repeat the same
    round and is dropped. The rest are solved as before (the rows are independent), so the figures are
    those of every row running every round. ``best`` is (score, β, x) so far; returns it updated."""
    score, best_beta, best_x = (b.copy() for b in best)
    active = np.arange(delta.shape[0])
    for _ in range(rounds):
        sub = pr.rows(active) if active.size < delta.shape[0] else pr
        on = delta[active] > 0
        x = np.where(on, snr_limit(sub, beta), 0.0)  # the power step at p_max
        sub_terms = ClusterTerms(*(np.asarray(getattr(terms, f))[active] for f in terms.__dataclass_fields__))
        new_beta, new_x, trial, _, _ = _trial(sub, sub_terms, delta[active], beta, x, weight[active])
        better = trial < score[active]
        score[active] = np.where(better, trial, score[active])
        best_beta[active] = np.where(better[:, None], new_beta, best_beta[active])
        best_x[active] = np.where(better[:, None], new_x, best_x[active])
        moving = np.any(new_beta != beta, axis=1)
        active, beta = active[moving], new_beta[moving]
        if active.size == 0:
            break
    return score, best_beta, best_x


def _price_levels(
    bracket: FloatArray, center: FloatArray, spread: FloatArray, prices: int = PRICES
) -> FloatArray:
    """PRICES prices in [μ_lo, μ_hi]: spread over it at first, then zooming (log scale) on the last pick."""
    lo, hi = bracket[..., 0], bracket[..., 1]
    lo_safe = np.maximum(lo, 1e-300)
    width = np.log(np.maximum(hi, lo_safe) / lo_safe) * np.minimum(spread, 1.0)
    mid = np.where(
        center > 0, np.log(np.clip(center, lo_safe, np.maximum(hi, lo_safe))), np.log(lo_safe) + 0.5 * width
    )
    frac = np.linspace(-0.5, 0.5, PRICES)[:prices]
    levels = np.exp(
        np.clip(
            mid[..., None] + width[..., None] * frac,
            np.log(lo_safe)[..., None],
            np.log(np.maximum(hi, lo_safe))[..., None],
        )
    )
    return np.where(lo[..., None] > 0, levels, 0.0)


def _expand(terms: ClusterTerms) -> ClusterTerms:
    """The terms with an axis for candidate prices before the cluster axis."""
    return ClusterTerms(*(np.asarray(getattr(terms, f))[..., None, :] for f in terms.__dataclass_fields__))


def _rate_model(
    pr: RoundProblem, beta: FloatArray, x: FloatArray, on: BoolArray
) -> tuple[FloatArray, FloatArray]:
    """(c, d) of r ≈ c + d·β: the link's SNR held fixed (c = 0), or at p_max its rate's tangent at β."""
    limit = snr_limit(pr, beta)
    at_max = on & (x >= limit * (1 - 1e-9))
    ell = np.log2(1.0 + np.maximum(x, 1e-300))
    tangent = pr.bandwidth_hz * (ell - x / ((1.0 + x) * np.log(2.0)))
    d = np.where(at_max, tangent, pr.bandwidth_hz * ell)
    c = np.where(at_max, beta * pr.bandwidth_hz * ell - tangent * beta, 0.0)
    return np.where(on, c, 0.0), np.where(on, d, 1.0)


def _zeta(pr: RoundProblem, x: FloatArray, on: BoolArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.where(on, 1.0 / (pr.bandwidth_hz * np.log2(1.0 + np.maximum(x, 1e-300))), 0.0)


def _score(
    pr: RoundProblem,
    terms: ClusterTerms,
    delta: IntArray,
    beta: FloatArray,
    x: FloatArray,
    weight: FloatArray,
) -> FloatArray:
    on = delta > 0
    u = np.where(on, 1.0 / (np.maximum(beta, 1e-300) * pr.bandwidth_hz * np.log2(1.0 + x)), 0.0)
    per_bit = np.where(on, x / np.log2(1.0 + np.maximum(x, 1e-300)), 0.0)
    score = latency_cost(pr, terms, delta, u) + np.sum(weight * per_bit, axis=-1)
    return np.where(np.all(np.isfinite(u), axis=-1), score, _INF)
