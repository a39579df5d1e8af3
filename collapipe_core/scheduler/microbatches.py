"""DSSDA's micro-batch step: the exact best M of every cluster for fixed segments and links.

For fixed δ, β, p, cluster n's time to its gather and queue-weighted energy are affine in M_n:

    R_n + I·T^pipe_n(M) = π_n + (M − 1)·ρ_n,   ρ_n = I·[max(c_F, max_k max(δ_k·a_k, P·u_k)) + max(c_B, …)]
    Σ_k Q_k·E_k(M) = ε_n + η_n·M,        η_n = Σ_k Q_k·(δ_k·e_k + 2·I·P·p_k·u_k)

and the gather time does not depend on M, so the micro-batches minimise (``problem.penalty``)

    penalty(max_n (π_n + (M_n − 1)·ρ_n) + U + max_n gather_n, Σ_n M_n) + Σ_n η_n·M_n,   1 ≤ M_n ≤ M_max_n

(M_max_n: the configured limit and the largest M whose activations fit every device's memory). Exactly:
the level Π̄ of the maximum is one of the values π_n + (m − 1)·ρ_n; under a level the latency T is fixed,
each cluster may take up to U_n(Π̄) micro-batches, and the convergence term is g/S with g = V·λ·σ²/b
(``variance``) or V·T·B_noise/b (``noise_scale``), convex in the total S: the t-th micro-batch beyond one
per cluster (S = N + t) gains g/((S − 1)·S), so the clusters take their extra ones cheapest η_n first
while that gain exceeds η_n. Every level is tried and the best is kept.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.problem import IntArray, RoundProblem, costs, penalty, quiet


@quiet
def best_microbatches(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, power: FloatArray, limit: IntArray
) -> IntArray:
    """The optimal M (S, N) for δ, u, p (S, N, K) and per-cluster limits (S, N) ≥ 1."""
    s_count, n, _ = delta.shape
    ones = np.ones((s_count, n), dtype=np.int64)
    one = costs(pr, delta, ones, time_per_bit, power)
    two = costs(pr, delta, 2 * ones, time_per_bit, power)
    pi = one.train_s  # (S, N)
    rho = two.train_s - one.train_s
    eta = np.sum(pr.queues * (two.energy_j - one.energy_j), axis=-1)
    rest = one.latency_s - np.max(pi, axis=1)  # (S,) U + the largest gather: T = level + rest
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
    taken = np.clip(np.minimum(before + extra, t_max) - before, 0, extra).astype(np.int64)
    micro = np.empty_like(units)
    np.put_along_axis(micro, np.broadcast_to(order[:, None, :], micro.shape), 1 + taken, axis=2)
    return micro
