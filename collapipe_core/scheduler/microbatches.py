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

from collapipe_core.network import FloatArray
from collapipe_core.scheduler import kernels
from collapipe_core.scheduler.problem import IntArray, RoundProblem


def memory_limit(pr: RoundProblem, delta: IntArray) -> IntArray:
    """Largest M (…, N) whose in-flight activations fit every scheduled device (0 if not even M = 1)."""
    lead = delta.shape[:-1]
    flat = delta.reshape(-1, delta.shape[-1])
    capacity = np.broadcast_to(pr.memory_bytes, delta.shape).reshape(flat.shape)
    limits = kernels.memory_limits(
        flat,
        capacity,
        pr.block_state_bytes,
        pr.activation_bytes,
        pr.buffer_bytes,
        pr.overhead_bytes,
        pr.microbatch_limit,
        pr.schedule == "1f1b",
    )
    return limits.reshape(lead)


def best_microbatches(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, power: FloatArray, limit: IntArray
) -> IntArray:
    """The optimal M (S, N) for δ, u, p (S, N, K) and per-cluster limits (S, N) ≥ 1 (compiled:
    ``kernels.joint_microbatches``, the formulas above)."""
    devices = np.stack([pr.compute_s, pr.compute_energy_j, pr.queues])
    constants = np.array(
        [
            pr.chain_sum_s,
            pr.chain_max_forward_s,
            pr.chain_max_backward_s,
            pr.iterations,
            pr.payload_bits,
            pr.V,
            pr.V * pr.lambda_ * pr.gradient_variance,
            pr.microbatch_size,
        ]
    )
    return kernels.joint_microbatches(
        delta, time_per_bit, power, limit, devices, constants, pr.microbatch_limit
    )
