"""DSSDA's micro-batch step: the exact best M of every cluster for fixed segments and links.

**A fixed micro-batch of b samples** (a step trains M·b). For fixed δ, β, p, cluster n's time to its
gather and queue-weighted energy are affine in M_n:

    R_n + I·T^pipe_n(M) = π_n + (M − 1)·ρ_n,   ρ_n = I·[max(c_F, max_k max(δ_k·a_k, P·u_k + τ)) + max(c_B, …)]
    Σ_k Q_k·E_k(M) = ε_n + η_n·M,        η_n = Σ_k Q_k·(δ_k·e_k + 2·I·P·p_k·u_k)

and the gather time does not depend on M, so the micro-batches minimise (``closed_form.penalty``)

    penalty(max_n (π_n + (M_n − 1)·ρ_n) + U + max_n gather_n, Σ_n M_n) + Σ_n η_n·M_n,   1 ≤ M_n ≤ M_max_n

(M_max_n: the configured limit and the largest M whose activations fit every device's memory). Exactly:
the level Π̄ of the maximum is one of the values π_n + (m − 1)·ρ_n; under a level the latency T is fixed,
each cluster may take up to U_n(Π̄) micro-batches, and the convergence term is g/S with g = V·λ·σ²/b
(``variance``) or V·T·B_noise/b (``noise_scale``), convex in the total S: the t-th micro-batch beyond one
per cluster (S = N + t) gains g/((S − 1)·S), so the clusters take their extra ones cheapest η_n first
while that gain exceeds η_n. Every level is tried and the best is kept.

**A fixed batch B** (M micro-batches of B/M). M does not change the gradient (the convergence term is
constant) and every per-micro-batch cost depends on M (smaller micro-batches, more of them), so the cost
is not affine in M: every cluster's time and energy are evaluated at each choice of M (the divisors of B
that fit in memory). The penalty rises with the level Π̄ of the maximum and the energy falls with it: at
each level each cluster takes its least-energy choice within it, the sum of those minima is swept over the
levels in increasing order (each cluster's running minimum), and the best level is kept — exact.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.costmodel.closed_form import costs, penalty
from collapipe_core.costmodel.problem import RoundProblem
from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.scheduler.arrays import IntArray, quiet


@quiet
def best_microbatches(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, power: FloatArray, fits: BoolArray
) -> IntArray:
    """The optimal M (S, N) for δ, u, p (S, N, K) among the choices of M that fit in memory (``fits``
    (S, N, C), ``RoundProblem.memory_fits``; where none fits, the one that needs the least memory)."""
    if pr.batch_size is not None:
        return _fixed_batch(pr, delta, time_per_bit, power, fits)
    limit = np.maximum(np.cumprod(fits, axis=-1).sum(axis=-1), 1)  # memory grows with M
    return _fixed_microbatch(pr, delta, time_per_bit, power, limit)


def _fixed_microbatch(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, power: FloatArray, limit: IntArray
) -> IntArray:
    """The optimal M (S, N) for δ, u, p (S, N, K) and per-cluster limits (S, N) ≥ 1 (affine costs)."""
    s_count, n, _ = delta.shape
    ones = np.ones((s_count, n), dtype=np.int64)
    pair = costs(  # at M = 1 and M = 2, (2, S, ...)
        pr,
        np.stack([delta, delta]),
        np.stack([ones, 2 * ones]),
        np.stack([time_per_bit] * 2),
        np.stack([power] * 2),
    )
    pi = pair.train_s[0]  # (S, N)
    rho = pair.train_s[1] - pair.train_s[0]
    eta = np.sum(pr.queues * (pair.energy_j[1] - pair.energy_j[0]), axis=-1)
    rest = pair.latency_s[0] - np.max(pi, axis=1)  # (S,) U + the largest gather: T = level + rest
    m = np.arange(1, pr.microbatch_limit + 1)
    levels = (pi[:, :, None] + (m - 1) * rho[:, :, None]).reshape(s_count, -1)  # (S, levels)
    levels = np.where((m <= limit[:, :, None]).reshape(s_count, -1), levels, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        room = np.floor((levels[:, :, None] - pi[:, None, :]) / rho[:, None, :] * (1 + 1e-12) + 1e-12) + 1.0
    room = np.where(
        rho[:, None, :] > 0, room, np.where(levels[:, :, None] >= pi[:, None, :] * (1 - 1e-12), np.inf, 0)
    )
    units = np.minimum(np.nan_to_num(room, nan=0.0), limit[:, None, :])  # (S, levels, N)
    feasible = np.all(units >= 1, axis=2) & ~np.isnan(levels)
    latency = np.nan_to_num(levels, nan=0.0) + rest[:, None]  # (S, levels)
    if pr.convergence == "noise_scale":  # the weight of 1/ΣM under each level: V·T·B_noise/b, T its latency
        assert pr.microbatch_size is not None
        gains = pr.V * pr.noise_scale / pr.microbatch_size * latency
    else:
        gains = np.full(latency.shape, pr.convergence_gain)
    micro = _greedy(np.maximum(units, 1).astype(np.int64), eta, gains)
    pipe = np.max(pi[:, None, :] + (micro - 1) * rho[:, None, :], axis=2)
    value = penalty(pr, pipe + rest[:, None], micro.sum(axis=2)) + np.sum(eta[:, None, :] * micro, axis=2)
    best = np.argmin(np.where(feasible, value, np.inf), axis=1)
    chosen: IntArray = micro[np.arange(s_count), best]
    return chosen


def _greedy(units: IntArray, eta: FloatArray, gain: FloatArray) -> IntArray:
    """M (S, levels, N) under per-cluster maxima ``units``: the extra micro-batches go to the clusters in
    increasing η_n, the t-th (total N + t) while g/((N + t − 1)·(N + t)) > η_n, g = ``gain`` (S, levels)."""
    n = units.shape[2]
    order = np.argsort(eta, axis=1, kind="stable")  # (S, N) cheapest first
    extra = np.take_along_axis(units - 1, order[:, None, :], axis=2)
    cost = np.take_along_axis(eta, order, axis=1)[:, None, :]
    before = np.cumsum(extra, axis=2) - extra
    with np.errstate(divide="ignore", over="ignore"):
        g = gain[:, :, None]
        ratio = np.where(cost > 0, g / np.where(cost > 0, cost, 1.0), np.inf)
        # the last t with gain/((N + t − 1)(N + t)) > η: (N + t − 1)(N + t) < ratio
        t_max = np.where(g > 0, np.ceil((1 + np.sqrt(1 + 4 * np.minimum(ratio, 1e300))) / 2 - n) - 1, 0.0)
    taken = np.minimum(np.maximum(np.minimum(before + extra, t_max) - before, 0), extra).astype(np.int64)
    micro = np.empty_like(units)
    np.put_along_axis(micro, np.broadcast_to(order[:, None, :], micro.shape), 1 + taken, axis=2)
    return micro


def _fixed_batch(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, power: FloatArray, fits: BoolArray
) -> IntArray:
    """The optimal M (S, N) with a fixed batch: each cluster's least-energy choice under the best level of
    the pipeline's maximum (module docstring)."""
    s_count, n, k = delta.shape
    choices = pr.microbatch_choices
    width = choices.size
    ok = np.moveaxis(fits, -1, 1)  # (S, C, N)
    lightest = np.zeros(ok.shape, dtype=bool)
    lightest[:, -1] = True  # more micro-batches of fewer samples: the least activation memory
    ok = ok | (lightest & ~ok.any(axis=1, keepdims=True))
    d = np.broadcast_to(delta[:, None], (s_count, width, n, k))
    m = np.broadcast_to(choices[None, :, None], (s_count, width, n))
    c = costs(pr, d, m, time_per_bit[:, None], power[:, None])
    train = np.where(ok, c.train_s, np.inf)  # (S, C, N)
    energy = np.sum(pr.queues * c.energy_j, axis=-1)
    rest = c.latency_s[:, 0] - np.max(c.train_s[:, 0], axis=-1)  # U + the largest gather (no M in it)
    # each cluster's choices by time; its running least energy, and what each choice adds to the sum
    order = np.argsort(train, axis=1, kind="stable")
    by_time, by_energy = np.take_along_axis(train, order, 1), np.take_along_axis(energy, order, 1)
    running = np.minimum.accumulate(np.where(np.isfinite(by_time), by_energy, np.inf), axis=1)
    first = np.arange(width)[None, :, None] == 0
    added = np.where(first, running, running - np.concatenate([running[:, :1], running[:, :-1]], axis=1))
    added = np.where(np.isfinite(by_time), added, 0.0)
    # sweep every (choice, cluster) in increasing time: the level, the sum of minima, clusters covered
    sweep = np.argsort(by_time.reshape(s_count, -1), axis=1, kind="stable")
    level = np.take_along_axis(by_time.reshape(s_count, -1), sweep, 1)
    total = np.cumsum(np.take_along_axis(added.reshape(s_count, -1), sweep, 1), axis=1)
    covered = np.cumsum(
        np.take_along_axis(np.broadcast_to(first, by_time.shape).reshape(s_count, -1), sweep, 1), 1
    )
    value = penalty(pr, level + rest[:, None], np.ones(level.shape)) + total
    value = np.where((covered == n) & np.isfinite(level), value, np.inf)
    best = np.take_along_axis(level, np.argmin(value, axis=1)[:, None], 1)  # (S, 1)
    within = ok & (c.train_s <= best[:, :, None] * (1 + 1e-12))
    pick = np.argmin(np.where(within, energy, np.inf), axis=1)  # (S, N)
    chosen: IntArray = choices[pick]
    return chosen
