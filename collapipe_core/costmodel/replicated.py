"""Latency, energy and memory of a *replicated* decision — the ``fl`` baseline (no pipeline).

Every participating device (δ_k = L: the whole encoder) trains on an equal share of its cluster's batch;
devices work in parallel (data parallelism). Per cluster n with m_n participants, a step of X_n samples
(M·b, or B with a fixed batch) and per iteration:

- the CU embeds the X_n samples and sends each participant its share x_k = X_n/m_n over its link (the
  CU's configured rate, one share after another);
- device k runs all L TEBs forward on its share, T^F_k = (x_k·L·Φ_F + L·Φ_0)/F_k (one pass of fixed work),
  and sends the outputs to the edge server over its own link (x_k·s·d·bytes at r_k, + τ);
- the edge server runs the head forward and backward on all X_n samples and sends each participant its
  gradients at the configured downlink rate (one share after another);
- device k runs all L TEBs backward, T^B_k = (x_k·L·Φ_B + L·Φ_0B)/F_k, and sends the input gradients to
  the CU over its own link; the CU runs the embedding backward.

    T^iter_n = CU_F + X·P/r_CU + max_k (T^F_k + x_k·P/r_k + τ) + edge_F + edge_B
               + X·P/r_edge + max_k (T^B_k + x_k·P/r_k + τ) + CU_B          (P = payload bits per sample)

- redistribution before the first iteration (:func:`~collapipe_core.costmodel.closed_form.redistribution`):
  the CU receives the averaged model (U) and sends every participant the whole encoder (δ_k = L) at r_k,
  with the optimizer state of the TEBs it did not hold in the previous round (a participant holds every
  TEB).
- aggregation: every participant sends its whole encoder (L·|θ_TEB|·bytes) to the CU at r_k, the CU
  uploads embedding and encoder: T^agg = max_n (max_k L·B/r_k + τ + U). Round T = max_n (R_n + I·T^iter_n)
  + T^agg.
- energy: E_k = κ·f_k²·cycles_k + p_k·(I·2·x_k·P + L·B)/r_k + p_prev_k·out_k·B_opt/r_prev_k, cycles over
  I iterations of x_k samples (the shares form one micro-batch each).
- memory: L·(weights + grads + optimizer state) + L·(x_k·a + a_0) (what the TEBs keep for backward) +
  overhead; under ``training.activation_checkpointing: all`` a participant keeps L·(x_k·a' + a'_0) and
  twice one TEB's working set, and its backward runs the forward again (x_k·L·(Φ'_B − Φ_B) + L·Φ_0 FLOPs).
- convergence term and objective as for a pipeline (:mod:`~collapipe_core.costmodel.closed_form`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from collapipe_core.costmodel.closed_form import convergence_terms, redistribution, round_latency
from collapipe_core.costmodel.evaluation import Evaluation
from collapipe_core.costmodel.problem import RoundProblem, link_rate_bps
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray, device_id

if TYPE_CHECKING:
    from collapipe_core.state import RoundState


def step_samples(pr: RoundProblem, micro: npt.ArrayLike) -> FloatArray:
    """Samples of one cluster's step (..., N): M·b, or B with a fixed batch."""
    m = np.asarray(micro, dtype=np.float64)
    if pr.batch_size is not None:
        return np.full(m.shape, float(pr.batch_size))
    assert pr.microbatch_size is not None
    out: FloatArray = m * pr.microbatch_size
    return out


def evaluate_replicated(state: RoundState, pr: RoundProblem, decision: Decision) -> Evaluation:
    delta = decision.num_blocks()
    beta, power, micro = decision.bandwidth_share(), decision.power_w(), decision.num_microbatches()
    L, iters, tau = pr.num_blocks, pr.iterations, pr.link_latency_s
    part = delta > 0
    count = part.sum(axis=1)
    batch = step_samples(pr, micro)  # samples per cluster per iteration
    share = np.where(part, batch[:, None] / np.maximum(count, 1)[:, None], 0.0)  # x_k
    rate = link_rate_bps(beta, power, state.gain, pr.bandwidth_hz, pr.noise_w_per_hz)
    payload = 8.0 * pr.payload_bytes  # bits per sample
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(part, 1.0 / rate, 0.0)
        airtime = np.where(part, share * payload * u, 0.0)
        gather = np.where(part, L * pr.block_bits * u + tau, 0.0)
    tx = np.where(part, airtime + tau, 0.0)
    fixed, fixed_b = pr.block_overhead_flops, pr.block_backward_overhead_flops  # one pass of fixed work
    fwd = share * L * pr.block_forward_flops / pr.flops_per_s + np.where(
        part, L * fixed / pr.flops_per_s, 0.0
    )
    bwd = share * L * pr.block_backward_flops / pr.flops_per_s + np.where(
        part, L * fixed_b / pr.flops_per_s, 0.0
    )
    again = np.zeros(delta.shape)  # a recomputing participant's forward again: x·L·(Φ'_B − Φ_B) + L·Φ_0
    if pr.recompute is not None:
        again = np.where(
            part & pr.recompute,
            share * L * (pr.recompute_backward_flops - pr.block_backward_flops) + L * fixed,
            0.0,
        )
    bwd = bwd + again / pr.flops_per_s
    cu_f, cu_b, edge_f, edge_b = (batch * f for f in pr.chain_flops)
    cu_f, cu_b = cu_f / pr.cu_flops_per_s, cu_b / pr.cu_flops_per_s
    edge = (edge_f + edge_b) / pr.edge_flops_per_s
    cu_send = batch * payload / pr.cu_link_rate_bps + tau
    edge_send = batch * payload / pr.edge_downlink_rate_bps + tau
    up = np.max(np.where(part, fwd + tx, 0.0), axis=1)
    down = np.max(np.where(part, bwd + tx, 0.0), axis=1)
    iteration = cu_f + cu_send + up + edge + edge_send + down + cu_b
    moves = redistribution(pr, delta, u, replicated=True)
    latency = float(round_latency(pr, moves.latency_s + iters * iteration, gather.max(axis=1)))
    without = float(round_latency(pr, moves.latency_without_moves_s + iters * iteration, gather.max(axis=1)))
    compute = iters * (fwd + bwd)
    transmit = iters * 2.0 * tx
    comm = np.where(part, transmit + gather, 0.0)
    idle = np.where(part, np.maximum(iters * iteration[:, None] - compute - transmit, 0.0), 0.0)
    cycles = iters * share * L * (pr.block_forward_flops + pr.block_backward_flops) / pr.flops_per_cycle
    cycles = cycles + np.where(part, iters * (L * (fixed + fixed_b) + again) / pr.flops_per_cycle, 0.0)
    airtime_total = iters * 2.0 * airtime + np.where(part, L * pr.block_bits * u, 0.0)
    energy = np.where(part, pr.cycle_energy_j * cycles + power * airtime_total, 0.0) + moves.upload_energy_j
    comm = comm + moves.upload_s
    memory = np.where(part, replicated_memory_bytes(pr, share), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        busy = compute.sum(axis=1) / (count * iters * iteration)
    convergence, obj_convergence = convergence_terms(pr, latency, float(micro.sum()))
    obj_latency = pr.V * latency
    obj_energy = float(np.sum(state.queues * energy))
    return Evaluation(
        latency_s=latency,
        aggregation_s=float(np.max(gather)) + pr.upload_s,
        pipeline_s=iteration,
        redistribution=moves,
        moves_latency_s=latency - without,
        bubble_fraction=np.where(count > 0, 1.0 - busy, 1.0),
        rate_bps=rate,
        compute_s=np.where(part, compute, 0.0),
        comm_s=comm,
        idle_s=idle,
        energy_j=energy,
        memory_bytes=memory,
        convergence=convergence,
        objective=obj_latency + obj_convergence + obj_energy,
        objective_latency=obj_latency,
        objective_convergence=obj_convergence,
        objective_energy=obj_energy,
        violations=tuple(_violations(state, pr, decision, rate, memory)),
    )


def replicated_memory_bytes(pr: RoundProblem, share: npt.ArrayLike) -> FloatArray:
    """Memory of a device training all L TEBs on ``share`` samples per step (the module docstring's
    formula): L·(state + share·a + a_0) + overhead; a recomputing participant keeps L·(share·a' + a'_0) and
    twice the working set of one TEB, share·a + a_0 (its activations rematerialised beside its backward's
    working set)."""
    x = np.asarray(share, dtype=np.float64)
    working = x * pr.block_activation_bytes + pr.activation_fixed_bytes
    kept = pr.num_blocks * working
    if pr.recompute is not None:
        again = pr.num_blocks * (x * pr.recompute_activation_bytes + pr.recompute_activation_fixed_bytes)
        kept = np.where(pr.recompute, again + 2.0 * working, kept)
    memory: FloatArray = pr.num_blocks * pr.block_state_bytes + kept + pr.overhead_bytes
    return memory


def _violations(
    state: RoundState, pr: RoundProblem, decision: Decision, rate: FloatArray, memory: FloatArray
) -> list[str]:
    sc, L = state.scenario, pr.num_blocks
    delta, beta, power, micro = (
        decision.num_blocks(),
        decision.bandwidth_share(),
        decision.power_w(),
        decision.num_microbatches(),
    )
    problems: list[str] = []
    for n in range(sc.num_clusters):
        if not np.all((delta[n] == 0) | (delta[n] == L)):
            problems.append(f"cluster {n}: a replicated decision gives each device 0 or all {L} TEBs")
        if not np.any(delta[n] > 0):
            problems.append(f"cluster {n}: no device trains the encoder")
        if beta[n].sum() > 1.0 + 1e-9:
            problems.append(f"cluster {n}: bandwidth shares sum to {beta[n].sum():.6g} > 1")
        wrong = pr.microbatch_problem(int(micro[n]))
        if wrong is not None:
            problems.append(f"cluster {n}: {wrong}")
    for n, k in np.argwhere(delta > 0):
        name = device_id(int(n), int(k))
        if not state.available[n, k]:
            problems.append(f"{name}: unavailable this round but holds the encoder")
        if rate[n, k] <= 0:
            problems.append(f"{name}: holds the encoder but has no bandwidth or power")
        if power[n, k] > sc.max_power_w[n, k] * (1 + 1e-9) or power[n, k] < 0 or beta[n, k] < 0:
            problems.append(f"{name}: power {power[n, k]:.4g} W or bandwidth share outside its limits")
        if memory[n, k] > sc.memory_bytes[n, k]:
            problems.append(
                f"{name}: needs {memory[n, k] / 2**20:.1f} MiB, has {sc.memory_bytes[n, k] / 2**20:.1f} MiB"
            )
    return problems
