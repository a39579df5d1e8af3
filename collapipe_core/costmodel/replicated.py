"""Latency, energy and memory of a *replicated* decision — the ``fl`` baseline (no pipeline).

Every participating device (δ_k = L: the whole encoder) trains on an equal share of its cluster's batch;
devices work in parallel (data parallelism). Per cluster n with m_n participants and per iteration:

- the CU embeds the cluster's M·b samples and sends each participant its share of x_k = M·b/m_n
  samples over its link (the CU's configured rate, one share after another);
- device k runs all L TEBs forward on its share, T^F_k = x_k·L·Φ_F/F_k, and sends the outputs to the
  edge server over its own link (x_k·s·d·bytes at r_k);
- the edge server runs the head forward and backward on all M·b samples and sends each participant its
  gradients at the configured downlink rate (one share after another);
- device k runs all L TEBs backward, T^B_k = 2·T^F_k, and sends the input gradients to the CU over its
  own link; the CU runs the embedding backward.

    T^iter_n = CU_F + M·b·P/r_CU + max_k (T^F_k + x_k·P/r_k) + edge_F + edge_B
               + M·b·P/r_edge + max_k (T^B_k + x_k·P/r_k) + CU_B          (P = payload bits per sample)

- redistribution before the first iteration (:mod:`~collapipe_core.costmodel.redistribution`): the CU
  receives the averaged model (U) and sends every participant the whole encoder (δ_k = L) at r_k, with
  the optimizer state of the TEBs it did not hold in the previous round (a participant holds every
  TEB): R_n = U + max_j out_j·B_opt/r_prev_j + max_k (L·B + in_k·B_opt)/r_k.
- aggregation: every participant sends its whole encoder (L·|θ_TEB|·bytes) to the CU at r_k, the CU
  uploads embedding and encoder: T^agg = max_n (max_k L·B/r_k + U). Round T = max_n (R_n + I·T^iter_n)
  + T^agg.
- energy: E_k = κ·f_k²·cycles_k + p_k·(I·2·x_k·P + L·B)/r_k + p_prev_k·out_k·B_opt/r_prev_k, cycles over
  I iterations of x_k samples.
- memory: L·(weights + grads + optimizer state) + x_k·L·(activations per sample per TEB) + overhead.
- convergence term and objective as in :mod:`~collapipe_core.costmodel.evaluate` (effective batch M·b).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from collapipe_core.costmodel.evaluate import Evaluation, convergence_terms, link_rate_bps
from collapipe_core.costmodel.redistribution import model_transfer_s, redistribution, round_latency_s
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray, device_id

if TYPE_CHECKING:
    from collapipe_core.state import RoundState


def evaluate_replicated(state: RoundState, decision: Decision) -> Evaluation:
    sc, prof, st = state.scenario, state.profile, state.settings
    delta = decision.num_blocks()
    if delta.shape != sc.shape:
        raise ValueError(f"decision covers {delta.shape} devices, the network has {sc.shape}")
    beta, power, micro = decision.bandwidth_share(), decision.power_w(), decision.num_microbatches()
    L, b, iters = prof.num_blocks, st.microbatch_size, st.local_iterations
    part = delta > 0
    count = part.sum(axis=1)
    batch = (micro * b).astype(np.float64)  # samples per cluster per iteration
    share = np.where(part, batch[:, None] / np.maximum(count, 1)[:, None], 0.0)  # x_k
    rate = link_rate_bps(beta, power, state.gain, sc.bandwidth_hz, sc.noise_density_w_per_hz)
    payload = 8.0 * prof.payload_bytes  # bits per sample
    with np.errstate(divide="ignore", invalid="ignore"):
        tx = np.where(part, share * payload / rate, 0.0)
        gather = np.where(part, L * prof.block_weight_bits / rate, 0.0)
    flops_per_s = sc.flops_per_s * state.speed_factor
    fwd = share * L * prof.block_forward_flops / flops_per_s
    bwd = share * L * prof.block_backward_flops / flops_per_s
    cu_f = batch * prof.embedding_forward_flops / sc.cu_flops_per_s
    cu_b = batch * prof.embedding_backward_flops / sc.cu_flops_per_s
    edge = batch * (prof.head_forward_flops + prof.head_backward_flops) / sc.edge_flops_per_s
    cu_send = batch * payload / sc.cu_link_rate_bps
    edge_send = batch * payload / sc.edge_downlink_rate_bps
    up = np.max(np.where(part, fwd + tx, 0.0), axis=1)
    down = np.max(np.where(part, bwd + tx, 0.0), axis=1)
    iteration = cu_f + cu_send + up + edge + edge_send + down + cu_b
    moves = redistribution(state, delta, "replicated", rate)
    aggregation = float(np.max(gather.max(axis=1) + model_transfer_s(state)))
    latency, moves_latency = round_latency_s(moves, iters * iteration, aggregation)
    compute = iters * (fwd + bwd)
    transmit = iters * 2.0 * tx
    comm = np.where(part, transmit + gather, 0.0)
    idle = np.where(part, np.maximum(iters * iteration[:, None] - compute - transmit, 0.0), 0.0)
    cycles = iters * share * L * (prof.block_forward_flops + prof.block_backward_flops) / sc.flops_per_cycle
    energy = np.where(part, sc.kappa * sc.cpu_hz**2 * cycles + power * comm, 0.0) + moves.upload_energy_j
    comm = comm + moves.upload_s
    memory = np.where(part, replicated_memory_bytes(state, share), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        busy = compute.sum(axis=1) / (count * iters * iteration)
    convergence, obj_convergence = convergence_terms(state, latency, float(micro.sum()))
    obj_latency = st.V * latency
    obj_energy = float(np.sum(state.queues * energy))
    return Evaluation(
        latency_s=latency,
        aggregation_s=aggregation,
        pipeline_s=iteration,
        redistribution=moves,
        moves_latency_s=moves_latency,
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
        violations=tuple(_violations(state, decision, rate, memory)),
    )


def replicated_memory_bytes(state: RoundState, share: npt.ArrayLike) -> FloatArray:
    """Memory of a device training all L TEBs on ``share`` samples per micro-batch step (the module
    docstring's formula): L·(state + share·activation per sample) + overhead."""
    prof = state.profile
    memory: FloatArray = (
        prof.num_blocks * (prof.block_state_bytes + np.asarray(share) * prof.block_activation_bytes)
        + state.scenario.runtime_overhead_bytes
    )
    return memory


def _violations(state: RoundState, decision: Decision, rate: FloatArray, memory: FloatArray) -> list[str]:
    sc, L = state.scenario, state.profile.num_blocks
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
        if not 1 <= micro[n] <= state.settings.microbatch_limit:
            limit = state.settings.microbatch_limit
            problems.append(f"cluster {n}: {int(micro[n])} micro-batches, allowed 1..{limit}")
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
