"""DSSDA's link allocation for rows of single clusters, compiled (the model: ``scheduler/allocation.py``).

:func:`allocate_rows` is :func:`~collapipe_core.scheduler.allocation.allocate_links` for a batch whose rows
are single clusters with the gather floor Γ_f = 0 (the link memo's problems), one row at a time in scalar
code: the cluster terms a, c1, c2, c^F, c^B and energy weights A_k = Q_k·bits_k·N0/h_k; the start at equal
shares and p_max with one bandwidth step (:func:`~collapipe_core.scheduler.kernels.bandwidth.bandwidth_row`)
at its rate model; then ``rounds`` rounds, every iterate scored by Lat(u) + Σ_k A_k·x_k/ℓ(x_k) and the best
kept:

- a row with an energy weight: the power step at each of PRICES prices μ in the last price bracket
  (spread over it, then zooming on the last pick), x_k from (1 + x)·ln(1 + x) − x = Ω_k/(β_k·W·A_k),
  Ω_k = μ·r_k²/d_k, by Newton's method in ln(1 + x), clipped to the power limit; the bandwidth step at
  each resulting SNR vector; the price with the least score continues (the first of equal ones);
- a row without one: every link at p_max, so a round maps β to the next β alone, and the row stops
  when β comes back unchanged (its further rounds would repeat the last one).

The arithmetic is that of the numpy formulation element by element and in the same order, and a row's
result does not depend on the other rows: Newton's stopping test runs over the row's own prices and
links (as numpy's does over a one-row batch; over a larger batch numpy iterates until every row has
converged, which can move the last bits). numba's libm exp/log may round differently from numpy's in
the last bit: β, p then match numpy's to rounding, and where near-tied prices pick differently the
score matches to 1e-9 relative (tests/core/scheduler/kernels/test_links.py).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.kernels.arrays import floats, ints
from collapipe_core.scheduler.kernels.bandwidth import bandwidth_row, bandwidth_scratch, row_latency
from collapipe_core.scheduler.kernels.scalars import INF, fmax, fmin, jit, row_sum
from collapipe_core.scheduler.problem import IntArray, RoundProblem

# digests of the files whose jit helpers this one compiles in (why: scalars.py's docstring)
SCALARS_SHA256 = "c3b4f4258ac946f7"
BANDWIDTH_SHA256 = "1cff1909c12bb433"

_LN2 = math.log(2.0)
_AT_LIMIT = 1 - 1e-9  # x ≥ limit·(1 − 1e-9): the link sits at its power limit
_NEWTON_STEPS = 40


def allocate_rows(
    pr: RoundProblem,
    cluster: IntArray,
    delta: IntArray,
    micro: IntArray | FloatArray,
    pipeline_weight: FloatArray,
    gather_weight: FloatArray,
    rounds: int,
    prices: int,
) -> tuple[FloatArray, FloatArray]:
    """β, p (R, K) of rows of cluster index (R,) of ``pr``, δ (R, K), M (R,), weights w, v (R,).

    Each row is that cluster's links alone with the gather floor at zero, ``rounds`` rounds of the link
    descent at ``prices`` (≥ 2) prices per round (:func:`allocation.allocate_links` on ``pr.rows(cluster)``).
    """
    rows, k = delta.shape
    beta = np.empty((rows, k))
    power = np.empty((rows, k))
    gain, queues, max_power_w, compute_s = floats(pr.gain, pr.queues, pr.max_power_w, pr.compute_s)
    micro_f, pipeline_f, gather_f = floats(micro, pipeline_weight, gather_weight)
    cluster_i, delta_i = ints(cluster, delta)
    _link_rows(
        cluster_i,
        delta_i,
        micro_f,
        pipeline_f,
        gather_f,
        gain,
        queues,
        max_power_w,
        compute_s,
        constants(pr),
        _fractions(prices),
        int(rounds),
        beta,
        power,
    )
    return beta, power


def constants(pr: RoundProblem) -> FloatArray:
    """The scalars the kernel reads: V, I, P, B, W, N0, c_F, c_B."""
    return np.array(
        [
            pr.V,
            pr.iterations,
            pr.payload_bits,
            pr.block_bits,
            pr.bandwidth_hz,
            pr.noise_w_per_hz,
            pr.chain_max_forward_s,
            pr.chain_max_backward_s,
        ],
        dtype=np.float64,
    )


@functools.lru_cache(maxsize=8)
def _fractions(prices: int) -> FloatArray:
    """Where the prices sit in the (log) bracket around its centre: linspace(−1/2, 1/2, prices) (shared:
    not to be written to; writable, the kind of array the kernel is compiled for)."""
    return np.linspace(-0.5, 0.5, prices)


def warm_up_links() -> None:
    """Compile (or load from the cache) :func:`allocate_rows`' one signature on a 1-row, 2-device problem."""
    ones = np.ones((1, 2))
    _link_rows(
        np.zeros(1, dtype=np.int64),
        np.array([[2, 1]], dtype=np.int64),
        np.ones(1),
        np.ones(1),
        np.ones(1),
        ones,
        ones,
        ones,
        ones,
        np.ones(8),
        _fractions(3),
        1,
        np.empty((1, 2)),
        np.empty((1, 2)),
    )


@jit
def _link_rows(  # type: ignore[no-untyped-def]
    cluster, delta, micro, pipeline_weight, gather_weight, gain, queues, max_power_w, compute_s, constants,
    frac, rounds, beta, power,
):  # fmt: skip
    k = delta.shape[1]
    prices = frac.shape[0]
    vectors = np.empty((_VECTORS, k))
    trials = np.empty((_TRIALS, prices, k))
    figures = np.empty((_FIGURES, prices))
    scratch = (np.empty(k, dtype=np.bool_), np.empty(6), vectors, trials, figures, bandwidth_scratch(k))
    for r in range(delta.shape[0]):
        n = cluster[r]
        device = (gain[n], queues[n], max_power_w[n], compute_s[n])
        row = (micro[r], pipeline_weight[r], gather_weight[r])
        _link_row(delta[r], row, device, constants, frac, rounds, beta[r], power[r], scratch)


_VECTORS = 12  # (K,) work rows of a row: see _link_row
_TRIALS = 6  # (prices, K) work planes: β', x', d of each trial, the power step's x, Newton's y and w
_FIGURES = 4  # (prices,) figures: each trial's score, price bracket (μ_lo, μ_hi), and the prices μ


@jit
def _link_row(delta, row, device, constants, frac, rounds, beta_out, power_out, scratch):  # type: ignore[no-untyped-def]
    """One row of :func:`allocate_rows`: β and p (K,) into ``beta_out`` and ``power_out``."""
    k = delta.shape[0]
    micro, pipeline_weight, gather_weight = row
    gain, queues, p_max, compute_s = device
    v, iterations, p_bits, b_bits, w_hz, n0, chain_f, chain_b = (
        constants[0], constants[1], constants[2], constants[3],
        constants[4], constants[5], constants[6], constants[7],
    )  # fmt: skip
    on, terms, vectors, trials, figures, bw = scratch
    weight, span, beta, x, c, d, best_beta, best_x, marginal = (
        vectors[0], vectors[1], vectors[2], vectors[3], vectors[4],
        vectors[5], vectors[6], vectors[7], vectors[8],
    )  # fmt: skip
    work = vectors[9:]
    trial_beta, trial_x, trial_d, power_x = trials[0], trials[1], trials[2], trials[3]
    trial_score, trial_lo, trial_hi, mu = figures[0], figures[1], figures[2], figures[3]
    radio = (p_max, gain, w_hz, n0)

    # cluster terms (Γ_f = 0) and energy weights A_k = Q_k·bits_k·N0/h_k
    longest = -INF
    any_weight = False
    count = 0
    for i in range(k):
        on[i] = delta[i] > 0
        span[i] = float(delta[i]) if on[i] else 1.0
        longest = fmax(longest, delta[i] * compute_s[i] if on[i] else 0.0)
        bits = 2.0 * iterations * micro * p_bits + delta[i] * b_bits
        weight[i] = queues[i] * bits * n0 / gain[i] if on[i] else 0.0
        any_weight = any_weight or weight[i] > 0
        count += 1 if on[i] else 0
    terms[0] = 2.0 * pipeline_weight * v * iterations * p_bits  # a
    terms[1] = pipeline_weight * v * iterations * (micro - 1.0)  # c1
    terms[2] = gather_weight * v  # c2
    terms[3] = fmax(chain_f, longest)  # c^F
    terms[4] = fmax(chain_b, 2.0 * longest)  # c^B
    terms[5] = 0.0  # Γ_f
    bands = (p_bits, b_bits, terms, bw)

    # the start: equal shares at p_max, then the bandwidth step at their rate model
    share = 1.0 / max(count, 1)
    for i in range(k):
        beta[i] = share if on[i] else 0.0
        x[i] = _snr_limit(beta[i], i, radio)
    best = _score(beta, x, on, span, weight, radio, bands, work)
    best_beta[:] = beta
    best_x[:] = x
    _rate_model(beta, x, on, radio, c, d)
    lo, hi = bandwidth_row(delta, c, d, terms, p_bits, b_bits, beta, bw)
    for i in range(k):
        x[i] = fmin(x[i], _snr_limit(beta[i], i, radio))

    if not any_weight:  # every link at p_max whatever the price: a round depends only on β
        for _ in range(rounds):
            for i in range(k):
                x[i] = _snr_limit(beta[i], i, radio) if on[i] else 0.0
            score, lo, hi = _trial(
                delta, beta, x, on, span, weight, radio, bands, trial_beta[0], trial_x[0], c, trial_d[0], work
            )
            if score < best:
                best = score
                best_beta[:] = trial_beta[0]
                best_x[:] = trial_x[0]
            moving = False
            for i in range(k):
                moving = moving or trial_beta[0, i] != beta[i]
                beta[i] = trial_beta[0, i]
            if not moving:
                break  # a round from the same β would repeat this one
    else:
        prices = frac.shape[0]
        center, spread = 0.0, 1.0
        for _ in range(rounds):
            _price_levels(lo, hi, center, spread, frac, mu)
            for i in range(k):
                rate = beta[i] * w_hz * math.log2(1.0 + x[i])
                marginal[i] = rate * rate / d[i] if on[i] else 0.0  # 1/(d·u²)
            _power_step(beta, marginal, mu, on, weight, radio, power_x, trials[4], trials[5])
            for p in range(prices):
                trial_score[p], trial_lo[p], trial_hi[p] = _trial(
                    delta, beta, power_x[p], on, span, weight, radio, bands, trial_beta[p], trial_x[p], c,
                    trial_d[p], work,
                )  # fmt: skip
            pick = 0  # np.argmin: the first least score, or the first NaN
            for p in range(1, prices):
                if math.isnan(trial_score[pick]):
                    break
                if trial_score[p] < trial_score[pick] or math.isnan(trial_score[p]):
                    pick = p
            beta[:] = trial_beta[pick]
            x[:] = trial_x[pick]
            d[:] = trial_d[pick]
            lo, hi = trial_lo[pick], trial_hi[pick]
            center = mu[pick]
            spread = spread if pick % (prices - 1) == 0 else spread / 3.0  # zoom unless at an end
            if trial_score[pick] < best:
                best = trial_score[pick]
                best_beta[:] = beta
                best_x[:] = x

    for i in range(k):
        power = best_beta[i] * w_hz * n0 * best_x[i] / gain[i] if on[i] else 0.0
        beta_out[i] = best_beta[i]
        power_out[i] = fmin(power, p_max[i])


@jit
def _snr_limit(beta, i, radio):  # type: ignore[no-untyped-def]
    """The largest SNR p_max allows link i on bandwidth share β (0 without bandwidth)."""
    p_max, gain, w_hz, n0 = radio
    return p_max[i] * gain[i] / (fmax(beta, 1e-300) * w_hz * n0) if beta > 0 else 0.0


@jit
def _rate_model(beta, x, on, radio, c, d):  # type: ignore[no-untyped-def]
    """(c, d) of r ≈ c + d·β: the SNR held fixed (c = 0), or at p_max the rate's tangent at β."""
    w_hz = radio[2]
    for i in range(beta.shape[0]):
        at_max = on[i] and x[i] >= _snr_limit(beta[i], i, radio) * _AT_LIMIT
        ell = math.log2(1.0 + fmax(x[i], 1e-300))
        tangent = w_hz * (ell - x[i] / ((1.0 + x[i]) * _LN2))
        if on[i]:
            c[i] = beta[i] * w_hz * ell - tangent * beta[i] if at_max else 0.0
            d[i] = tangent if at_max else w_hz * ell
        else:
            c[i] = 0.0
            d[i] = 1.0


@jit
def _trial(delta, beta, x, on, span, weight, radio, bands, new_beta, new_x, c, d, work):  # type: ignore[no-untyped-def]
    """The bandwidth step at the SNRs x reached on β, x held at the power limit where it was there:
    β', x' into ``new_beta``, ``new_x``, the rate model's d into ``d``; returns (score, μ_lo, μ_hi)."""
    p_bits, b_bits, terms, bw = bands
    _rate_model(beta, x, on, radio, c, d)
    lo, hi = bandwidth_row(delta, c, d, terms, p_bits, b_bits, new_beta, bw)
    for i in range(beta.shape[0]):
        limit = _snr_limit(new_beta[i], i, radio)
        new_x[i] = fmin(limit if x[i] >= _snr_limit(beta[i], i, radio) * _AT_LIMIT else x[i], limit)
    return _score(new_beta, new_x, on, span, weight, radio, bands, work), lo, hi


@jit
def _score(beta, x, on, span, weight, radio, bands, work):  # type: ignore[no-untyped-def]
    """Lat(u) + Σ_k A_k·x_k/ℓ(x_k), u_k = 1/(β_k·W·ℓ(x_k)); ∞ if a scheduled u_k is not finite."""
    p_bits, b_bits, terms, _ = bands
    w_hz = radio[2]
    u, energy, latency_work = work[0], work[1], work[2]
    finite = True
    for i in range(beta.shape[0]):
        if on[i]:
            u[i] = 1.0 / (fmax(beta[i], 1e-300) * w_hz * math.log2(1.0 + x[i]))
            energy[i] = weight[i] * (x[i] / math.log2(1.0 + fmax(x[i], 1e-300)))
        else:
            u[i] = 0.0
            energy[i] = 0.0
        finite = finite and math.isfinite(u[i])
    if not finite:
        return INF
    k = beta.shape[0]
    return row_latency(u, span, on, terms, p_bits, b_bits, latency_work) + row_sum(energy, k)


@jit
def _price_levels(lo, hi, center, spread, frac, mu):  # type: ignore[no-untyped-def]
    """Prices μ in [μ_lo, μ_hi] (0 if μ_lo = 0): spread over it (log scale) at first, then zooming on
    ``center``, the last pick, by ``spread``."""
    lo_safe = fmax(lo, 1e-300)
    top = fmax(hi, lo_safe)
    width = math.log(top / lo_safe) * fmin(spread, 1.0)
    mid = math.log(fmin(fmax(center, lo_safe), top)) if center > 0 else math.log(lo_safe) + 0.5 * width
    low, high = math.log(lo_safe), math.log(top)
    for p in range(frac.shape[0]):
        mu[p] = math.exp(fmin(fmax(mid + width * frac[p], low), high)) if lo > 0 else 0.0


@jit
def _power_step(beta, marginal, mu, on, weight, radio, power_x, y, w):  # type: ignore[no-untyped-def]
    """SNR x per (price, link) into ``power_x``: (1 + x)·ln(1 + x) − x = Ω/(β·W·A), Ω = μ·marginal,
    clipped to the power limit; the limit itself where Ω/(β·W·A) is not finite (no energy weight).
    ``y``, ``w`` are scratch like ``power_x``."""
    w_hz = radio[2]
    prices, k = power_x.shape
    any_finite = False
    for p in range(prices):
        for i in range(k):
            omega = mu[p] * marginal[i]
            y[p, i] = omega / (fmax(beta[i], 1e-300) * w_hz * weight[i]) if on[i] and weight[i] > 0 else INF
            power_x[p, i] = 1.0 if math.isfinite(y[p, i]) else 0.0  # solved by Newton's method
            any_finite = any_finite or power_x[p, i] > 0
    if any_finite:
        _solve_foc(y.reshape(prices * k), w.reshape(prices * k))  # y ← x, every element together
    for p in range(prices):
        for i in range(k):
            limit = _snr_limit(beta[i], i, radio)
            power_x[p, i] = (fmin(y[p, i], limit) if power_x[p, i] > 0 else limit) if on[i] else 0.0


@jit
def _solve_foc(y, w):  # type: ignore[no-untyped-def]
    """x ≥ 0 with (1 + x)·ln(1 + x) − x = y, in place of y (each y at most 1e300): Newton on w = ln(1 + x)
    from an upper bound, until every element's step is within 1e-12 of its w (at most 40 steps)."""
    n = y.shape[0]
    for j in range(n):
        yj = fmax(fmin(y[j], 1e300), 0.0)
        y[j] = yj
        small = math.sqrt(3.0 * yj)  # x ≤ √(3y) while x ≤ 1
        w[j] = math.log1p(small) if small <= 1.0 else fmax(2.0, math.log1p(yj)) + 1.0
    for _ in range(_NEWTON_STEPS):
        done = True
        for j in range(n):
            ew = math.exp(w[j])
            step = (ew * (w[j] - 1.0) + 1.0 - y[j]) / fmax(w[j] * ew, 1e-300)
            w[j] = fmax(w[j] - step, 0.0)
            done = done and abs(step) <= 1e-12 * fmax(w[j], 1e-300)
        if done:
            break
    for j in range(n):
        y[j] = math.expm1(w[j])
