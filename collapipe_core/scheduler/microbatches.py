"""DSSDA's micro-batch step: the exact best M per cluster for fixed segments and links.

For fixed δ, β, p, cluster n's iteration time and queue-weighted energy are affine in M_n:

    I·T^pipe_n(M) = π_n + (M − 1)·ρ_n,   ρ_n = I·[max_i F_i + max_i B_i]   (stage maxima)
    Σ_k Q_k·E_k(M) = ε_n + η_n·M,        η_n = Σ_k Q_k·(δ_k·e_k + 2·I·P·p_k·u_k)

and the gather time does not depend on M, so the micro-batches minimise

    V·max_n (π_n + (M_n − 1)·ρ_n) + Σ_n η_n·M_n + V·λ·σ²/(b·Σ_n M_n),   1 ≤ M_n ≤ M_max_n

(M_max_n: the configured limit and the largest M whose activations fit every device's memory). This is
solved exactly by enumerating the level Π̄ of the maximum over the values π_n + (m − 1)·ρ_n: under Π̄
each cluster may take up to U_n(Π̄) micro-batches, and since V·λ·σ²/(b·T) is convex in the total T the
extra micro-batches beyond M_n = 1 are taken greedily from the clusters with the smallest η_n while the
marginal gain V·λ·σ²/(b·T·(T + 1)) exceeds η_n.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.costmodel.evaluate import in_flight_microbatches
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.problem import IntArray, RoundProblem, quiet, take_last


def memory_limit(pr: RoundProblem, delta: IntArray) -> IntArray:
    """Largest M (…, N) whose in-flight activations fit every scheduled device (0 if not even M = 1)."""
    lead = delta.shape[:-1]
    flat = delta.reshape(-1, delta.shape[-1])
    capacity = np.broadcast_to(pr.memory_bytes, delta.shape).reshape(flat.shape)
    best = np.zeros(flat.shape[0], dtype=np.int64)
    for m in range(1, pr.microbatch_limit + 1):
        micro = np.full(flat.shape[0], m, dtype=np.int64)
        in_flight = in_flight_microbatches(flat, micro, pr.schedule)
        memory = flat * (pr.block_state_bytes + in_flight * pr.activation_bytes) + pr.overhead_bytes
        fits = np.all((flat == 0) | (memory <= capacity), axis=1)
        best = np.where(fits & (best == m - 1), m, best)
    return best.reshape(lead)


@quiet
def best_microbatches(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, power: FloatArray, limit: IntArray
) -> IntArray:
    """The optimal M (S, N) for δ, u, p (S, N, K) and per-cluster limits (S, N) ≥ 1."""
    on = delta > 0
    u = np.where(on, time_per_bit, 0.0)
    x = delta * pr.compute_s
    tx = pr.payload_bits * u
    base = pr.chain_sum_s + np.sum(np.where(on, 3 * x + 2 * tx, 0.0), axis=-1)
    max_f = np.maximum(pr.chain_max_forward_s, np.max(np.where(on, np.maximum(x, tx), 0.0), axis=-1))
    max_b = np.maximum(pr.chain_max_backward_s, np.max(np.where(on, np.maximum(2 * x, tx), 0.0), axis=-1))
    pi, rho = pr.iterations * base, pr.iterations * (max_f + max_b)
    eta = np.sum(
        np.where(
            on,
            pr.queues * (delta * pr.compute_energy_j + 2 * pr.iterations * pr.payload_bits * power * u),
            0.0,
        ),
        axis=-1,
    )
    s_count, _n = pi.shape
    m = np.arange(1, pr.microbatch_limit + 1)
    levels = (pi[..., None] + (m - 1) * rho[..., None]).reshape(s_count, -1)  # (S, N·Mlim) candidate Π̄
    levels = np.where((m <= limit[..., None]).reshape(s_count, -1), levels, np.inf)
    # U_n(Π̄): micro-batches cluster n may take under the level
    room = np.where(
        rho[:, None, :] > 0,
        np.floor((levels[:, :, None] - pi[:, None, :]) / rho[:, None, :] * (1 + 1e-12) + 1e-12) + 1,
        np.where(levels[:, :, None] >= pi[:, None, :] * (1 - 1e-12), limit[:, None, :], 0),
    )
    units = np.clip(room, 0, limit[:, None, :]).astype(np.int64)  # (S, P, N)
    feasible = np.all(units >= 1, axis=2) & np.isfinite(levels)
    micro = _greedy(pr, np.maximum(units, 1), eta)
    mf = micro.astype(np.float64)
    value = (
        pr.V * np.max(pi[:, None, :] + (mf - 1) * rho[:, None, :], axis=2)
        + np.sum(eta[:, None, :] * mf, axis=2)
        + pr.V * pr.lambda_ * pr.gradient_variance / (pr.microbatch_size * mf.sum(axis=2))
    )
    value = np.where(feasible, value, np.inf)
    pick = np.argmin(value, axis=1)
    return np.asarray(micro[np.arange(s_count), pick], dtype=np.int64)


def _greedy(pr: RoundProblem, units: IntArray, eta: FloatArray) -> IntArray:
    """M (S, P, N): extra micro-batches from the cheapest clusters while the convergence gain pays."""
    _s_count, _p, n = units.shape
    order = np.argsort(eta, axis=1)  # (S, N) cheapest first
    cost = take_last(eta, order)[:, None, :]
    extra = take_last(units - 1, np.broadcast_to(order[:, None, :], units.shape))
    before = np.cumsum(extra, axis=2) - extra
    gain = pr.V * pr.lambda_ * pr.gradient_variance / pr.microbatch_size
    ratio = np.where(cost > 0, gain / np.where(cost > 0, cost, 1.0), np.inf)
    # the t-th extra unit (total N + t) gains gain/((N + t − 1)(N + t)); worth it while (N+t−1)(N+t) < ratio
    t_max = np.where(
        np.isfinite(ratio), np.ceil((1 + np.sqrt(1 + 4 * np.minimum(ratio, 1e300))) / 2 - n) - 1, np.inf
    )
    t_max = np.where(gain > 0, t_max, 0)
    taken = np.clip(np.minimum(before + extra, t_max) - before, 0, extra)
    micro_sorted = 1 + taken.astype(np.int64)
    micro = np.empty_like(micro_sorted)
    np.put_along_axis(micro, np.broadcast_to(order[:, None, :], units.shape), micro_sorted, axis=2)
    return np.asarray(micro, dtype=np.int64)
