"""Latency, energy and memory of a decision for one round (the documented system model, docs/system-model.md).

All arrays are (N, K): cluster n, device k. Per micro-batch of b samples:

- compute:   T^F_k = δ_k·b·Φ_F / F_k,  T^B_k = δ_k·b·Φ_B / F_k,  F_k = f_k · FLOPs/cycle · speed_k
- link rate: r_k = β_k·W·log2(1 + p_k·h_k / (β_k·W·N0)); a payload of b·s·d·bytes takes 8·bytes / r_k.
  Device k transmits its activations downstream and its input gradients upstream on its own link;
  the CU's forward link and the edge server's gradient downlink run at fixed configured rates.
- chain of stages of a cluster: CU → link → device → link → ... → device → link → edge server.
  GPipe makespan (closed form, forward then backward):
      T^pipe = Σ_i F_i + (M−1)·max_i F_i + Σ_i B_i + (M−1)·max_i B_i    over compute and link stages.
  1F1B has no closed form here: its makespan comes from the discrete-event schedule of
  :mod:`collapipe_core.costmodel.timeline` (it equals GPipe's only for identical compute stages joined
  by instant links; it is shorter when stages differ and can be longer when links take time).
- redistribution before the first iteration (:mod:`collapipe_core.costmodel.redistribution`): the
  edge server sends the averaged model to the CU (U, the upload's time), the previous holders of the
  TEBs that change device upload their optimizer state to the CU at their previous round's rates,
  then the CU sends each device its δ_k TEBs' weights and the moved state at r_k (links in parallel):
      R_n = U + max_j out_j·B_opt/r_prev_j + max_k (δ_k·B + in_k·B_opt)/r_k.
- aggregation: each scheduled device sends its δ_k blocks to the CU at r_k, the CU uploads the
  cluster's embedding and encoder at the configured uplink rate; T^agg = max_n (gather_n + U).
- round latency: T = max_n (R_n + I · T^pipe_n) + T^agg.
- energy of device k: E_k = κ·f_k²·cycles_k + p_k·(transmit time) + p_prev_k·out_k·B_opt/r_prev_k,
  cycles = FLOPs / (FLOPs/cycle); the last term, the upload of moved optimizer state, is charged
  to the previous holder whether or not it holds TEBs this round.
- memory of a scheduled device k: δ_k·(weights + grads + optimizer state) + (n_k·δ_k + 1)·b·a
  + 2·M·b·s·d·bytes + runtime overhead, with a the activations one TEB keeps for backward per sample
  (measured), n_k the micro-batches in flight = M (GPipe) or min(C − i, M) (1F1B, stage i of C), the
  "+ 1" the backward working set of one micro-batch through one TEB and the last term the pipeline's
  receive buffers (each micro-batch's activation in and gradient in). Within 10 % of the tensor peak
  measured on distributed ranks (docs/distributed.md); :func:`device_memory_bytes`.
- convergence term (``scheduler.convergence``, :func:`penalty_terms`): ``variance`` G = σ²/(b·Σ_n M_n),
  objective = V·(T + λ·G) + Σ_k Q_k·E_k; ``noise_scale`` G = B_noise/(b·Σ_n M_n), objective = V·T·(1 + G)
  + Σ_k Q_k·E_k (modeled time per unit of training progress, B_noise measured in training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from collapipe_core.costmodel.redistribution import (
    Redistribution,
    model_transfer_s,
    redistribution,
    round_latency_s,
)
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray, IntArray, device_id

if TYPE_CHECKING:  # state builds on the profile of this package
    from collapipe_core.state import RoundState


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Modeled figures of one round under one decision (seconds, joules, bytes, bit/s)."""

    latency_s: float
    aggregation_s: float
    pipeline_s: FloatArray  # (N,) one iteration's makespan per cluster
    redistribution: Redistribution  # the phase before the first iteration: R_n, the block moves
    moves_latency_s: float  # the part of latency_s the block moves cost (T − T with no TEB moved)
    bubble_fraction: FloatArray  # (N,) 1 − device compute time / (scheduled devices × I·T^pipe)
    rate_bps: FloatArray  # (N, K)
    compute_s: FloatArray  # (N, K) per round
    comm_s: FloatArray  # (N, K) per round: pipeline transmissions + upload of the segment + moved state
    idle_s: FloatArray  # (N, K) per round: pipeline time neither computing nor transmitting
    energy_j: FloatArray  # (N, K)
    memory_bytes: FloatArray  # (N, K)
    convergence: float  # G(M): σ²/(b·ΣM) or B_noise/(b·ΣM) (penalty_terms)
    objective: float
    objective_latency: float  # V·T
    objective_convergence: float  # V·λ·G, or V·T·G with the noise-scale term
    objective_energy: float  # Σ Q·E
    violations: tuple[str, ...]

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def redistribution_s(self) -> FloatArray:
        """(N,) R_n: each cluster's redistribution before its first iteration."""
        return self.redistribution.latency_s

    @property
    def blocks_moved(self) -> IntArray:
        """(N,) TEBs whose optimizer state changed device, per cluster."""
        return self.redistribution.blocks_moved


def penalty_terms(
    convergence: str,
    V: float,
    lambda_: float,
    variance: float,
    noise_scale: float,
    batch: FloatArray | float,
    latency: FloatArray | float,
) -> tuple[FloatArray, FloatArray]:
    """(G, the convergence part of the penalty) of rounds of latency T training a batch b·Σ_n M_n (any
    broadcast shapes); the penalty is V·T + that part:

    - ``variance``:    G = σ²/(b·ΣM),       part V·λ·G             (penalty V·(T + λ·σ²/(b·ΣM)))
    - ``noise_scale``: G = B_noise/(b·ΣM),  part V·T·G             (penalty V·T/progress, progress =
      b·ΣM/(b·ΣM + B_noise): a step of batch B makes B/(B + B_noise) of the progress of an infinitely large
      one, McCandlish et al. 2018, "An Empirical Model of Large-Batch Training")

    The one place both terms are written: the cost model and the schedulers' closed form call it."""
    b = np.asarray(batch, dtype=np.float64)
    if convergence == "noise_scale":
        g = noise_scale / b
        return g, V * np.asarray(latency, dtype=np.float64) * g
    g = variance / b
    return g, V * lambda_ * g


def convergence_terms(state: RoundState, latency: float, total_micro: float) -> tuple[float, float]:
    """:func:`penalty_terms` of one round of ``state``."""
    st = state.settings
    g, part = penalty_terms(
        st.convergence,
        st.V,
        st.lambda_,
        st.gradient_variance,
        state.noise_scale,
        st.microbatch_size * total_micro,
        latency,
    )
    return float(g), float(part)


def link_rate_bps(
    bandwidth_share: FloatArray, power_w: FloatArray, gain: FloatArray, bandwidth_hz: float, noise: float
) -> FloatArray:
    """Shannon rate r = βW·log2(1 + p·h/(βW·N0)); 0 where β = 0 or p = 0."""
    bw = np.asarray(bandwidth_share, dtype=np.float64) * bandwidth_hz
    with np.errstate(divide="ignore", invalid="ignore"):
        snr = np.where(bw > 0, power_w * gain / (bw * noise), 0.0)
    return np.where(bw > 0, bw * np.log2(1.0 + snr), 0.0)


def device_memory_bytes(
    delta: npt.ArrayLike,
    in_flight: npt.ArrayLike,
    micro: npt.ArrayLike,
    state_bytes: float,
    activation_bytes: float,
    buffer_bytes: float,
    overhead_bytes: float,
) -> FloatArray:
    """Memory of a scheduled device holding ``delta`` TEBs (the formula in the module docstring):
    ``activation_bytes`` is one micro-batch's through one TEB (b·a), ``buffer_bytes`` one micro-batch's
    receive buffers (2·b·s·d·bytes); the arguments broadcast."""
    d, n, m = (np.asarray(x, dtype=np.float64) for x in (delta, in_flight, micro))
    result: FloatArray = (
        d * (state_bytes + n * activation_bytes) + activation_bytes + m * buffer_bytes + overhead_bytes
    )
    return result


def in_flight_microbatches(num_blocks: IntArray, num_microbatches: IntArray, schedule: str) -> IntArray:
    """Micro-batches whose activations a device holds at its peak (GPipe: M; 1F1B: min(C − i, M)), for
    δ (..., K) and M (...).

    C counts the compute stages of the cluster's chain (CU, scheduled devices, edge server) and i is
    the device's 0-based position in it (the CU is position 0).
    """
    micro = np.broadcast_to(np.asarray(num_microbatches)[..., None], num_blocks.shape)
    if schedule == "gpipe":
        return np.asarray(micro, dtype=np.int64)
    scheduled = num_blocks > 0
    position = np.cumsum(scheduled, axis=-1)  # 1-based among scheduled devices = chain index
    stages = scheduled.sum(axis=-1, keepdims=True) + 2
    return np.asarray(np.minimum(stages - position, micro), dtype=np.int64)


@dataclass(frozen=True, eq=False)
class StageTimes:
    """Per micro-batch times of every stage of every cluster's chain (seconds) and the link rates."""

    device_forward_s: FloatArray  # (N, K)
    device_backward_s: FloatArray  # (N, K)
    device_send_s: FloatArray  # (N, K) one payload over the device's own link (0 when unscheduled)
    rate_bps: FloatArray  # (N, K)
    cu_forward_s: float
    cu_backward_s: float
    edge_forward_s: float
    edge_backward_s: float
    cu_link_s: float  # CU → first device (activations)
    edge_link_s: float  # edge server → last device (gradients)


def stage_times(state: RoundState, decision: Decision) -> StageTimes:
    sc, prof, b = state.scenario, state.profile, state.settings.microbatch_size
    delta = decision.num_blocks()
    sched = delta > 0
    flops_per_s = sc.flops_per_s * state.speed_factor
    rate = link_rate_bps(
        decision.bandwidth_share(), decision.power_w(), state.gain, sc.bandwidth_hz, sc.noise_density_w_per_hz
    )
    payload_bits = 8.0 * b * prof.payload_bytes
    with np.errstate(divide="ignore"):
        send = np.where(sched, payload_bits / np.where(rate > 0, rate, 0.0), 0.0)
    return StageTimes(
        device_forward_s=delta * b * prof.block_forward_flops / flops_per_s,
        device_backward_s=delta * b * prof.block_backward_flops / flops_per_s,
        device_send_s=send,
        rate_bps=rate,
        cu_forward_s=b * prof.embedding_forward_flops / sc.cu_flops_per_s,
        cu_backward_s=b * prof.embedding_backward_flops / sc.cu_flops_per_s,
        edge_forward_s=b * prof.head_forward_flops / sc.edge_flops_per_s,
        edge_backward_s=b * prof.head_backward_flops / sc.edge_flops_per_s,
        cu_link_s=payload_bits / sc.cu_link_rate_bps,
        edge_link_s=payload_bits / sc.edge_downlink_rate_bps,
    )


def evaluate(state: RoundState, decision: Decision) -> Evaluation:
    """Model the round: latency, energy, memory per device, the objective and every violated constraint."""
    if decision.mode == "replicated":
        from collapipe_core.costmodel.replicated import evaluate_replicated

        return evaluate_replicated(state, decision)
    sc, prof, st = state.scenario, state.profile, state.settings
    delta = decision.num_blocks()
    beta = decision.bandwidth_share()
    power = decision.power_w()
    micro = decision.num_microbatches()
    _check_shape(state, delta)
    b, iters = st.microbatch_size, st.local_iterations
    sched = delta > 0
    scheduled_count = sched.sum(axis=1)
    times = stage_times(state, decision)
    t_fwd, t_bwd, t_tx, rate = (
        times.device_forward_s,
        times.device_backward_s,
        times.device_send_s,
        times.rate_bps,
    )
    cu_f, cu_b, edge_f, edge_b = (
        times.cu_forward_s,
        times.cu_backward_s,
        times.edge_forward_s,
        times.edge_backward_s,
    )
    cu_link, edge_link = times.cu_link_s, times.edge_link_s

    masked = np.where(sched, 1.0, 0.0)
    sum_f = cu_f + cu_link + ((t_fwd + t_tx) * masked).sum(axis=1) + edge_f
    sum_b = edge_b + edge_link + ((t_bwd + t_tx) * masked).sum(axis=1) + cu_b
    max_dev_f = np.max(np.where(sched, np.maximum(t_fwd, t_tx), 0.0), axis=1)
    max_dev_b = np.max(np.where(sched, np.maximum(t_bwd, t_tx), 0.0), axis=1)
    max_f = np.maximum(max_dev_f, max(cu_f, cu_link, edge_f))
    max_b = np.maximum(max_dev_b, max(cu_b, edge_link, edge_b))
    pipeline = sum_f + (micro - 1) * max_f + sum_b + (micro - 1) * max_b
    if st.schedule == "1f1b":  # no closed form: the discrete-event schedule gives the makespan
        from collapipe_core.costmodel.chain import cluster_timeline

        pipeline = np.array(
            [cluster_timeline(state, decision, n, times).makespan_s for n in range(len(micro))]
        )

    # -- redistribution and aggregation -----------------------------------------------------------
    moves = redistribution(state, delta, decision.mode, rate)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_gather = np.where(sched, delta * prof.block_weight_bits / rate, 0.0)
    aggregation = float(np.max(t_gather.max(axis=1) + model_transfer_s(state)))
    latency, moves_latency = round_latency_s(moves, iters * pipeline, aggregation)

    # -- per device, per round --------------------------------------------------------------------
    per_round = iters * micro[:, None]
    compute = per_round * (t_fwd + t_bwd)
    transmit = per_round * 2.0 * t_tx
    comm = transmit + t_gather + moves.upload_s
    idle = np.where(sched, np.maximum(iters * pipeline[:, None] - compute - transmit, 0.0), 0.0)
    flops = per_round * delta * b * (prof.block_forward_flops + prof.block_backward_flops)
    cycles = flops / sc.flops_per_cycle
    energy = (
        sc.kappa * sc.cpu_hz**2 * cycles
        + power * np.where(sched, transmit + t_gather, 0.0)
        + moves.upload_energy_j
    )
    in_flight = in_flight_microbatches(delta, micro, st.schedule)
    memory = np.where(
        sched,
        device_memory_bytes(
            delta,
            in_flight,
            micro[:, None],
            prof.block_state_bytes,
            b * prof.block_activation_bytes,
            2.0 * b * prof.payload_bytes,
            sc.runtime_overhead_bytes,
        ),
        0.0,
    )
    with np.errstate(invalid="ignore"):
        busy_fraction = compute.sum(axis=1) / (scheduled_count * iters * pipeline)
    bubble = np.where(scheduled_count > 0, 1.0 - busy_fraction, 1.0)

    # -- objective ---------------------------------------------------------------------------------
    convergence, obj_convergence = convergence_terms(state, latency, float(micro.sum()))
    obj_latency = st.V * latency
    obj_energy = float(np.sum(state.queues * energy))
    return Evaluation(
        latency_s=latency,
        aggregation_s=aggregation,
        pipeline_s=pipeline,
        redistribution=moves,
        moves_latency_s=moves_latency,
        bubble_fraction=bubble,
        rate_bps=rate,
        compute_s=compute,
        comm_s=comm,
        idle_s=idle,
        energy_j=energy,
        memory_bytes=memory,
        convergence=convergence,
        objective=obj_latency + obj_convergence + obj_energy,
        objective_latency=obj_latency,
        objective_convergence=obj_convergence,
        objective_energy=obj_energy,
        violations=tuple(_violations(state, delta, beta, power, micro, rate, memory)),
    )


def _check_shape(state: RoundState, delta: IntArray) -> None:
    if delta.shape != state.scenario.shape:
        raise ValueError(
            f"decision covers {delta.shape[0]}×{delta.shape[1] if delta.ndim > 1 else 0} devices, "
            f"the network has {state.scenario.shape[0]}×{state.scenario.shape[1]}"
        )


def _violations(
    state: RoundState,
    delta: IntArray,
    beta: FloatArray,
    power: FloatArray,
    micro: IntArray,
    rate: FloatArray,
    memory: FloatArray,
) -> list[str]:
    """Every violated constraint, each naming the device or cluster and the amounts."""
    sc, st = state.scenario, state.settings
    problems: list[str] = []
    blocks = state.profile.num_blocks
    for n in range(sc.num_clusters):
        if int(delta[n].sum()) != blocks:
            problems.append(
                f"cluster {n}: segments hold {int(delta[n].sum())} blocks, the encoder has {blocks}"
            )
        if beta[n].sum() > 1.0 + 1e-9:
            problems.append(f"cluster {n}: bandwidth shares sum to {beta[n].sum():.6g} > 1")
        if not 1 <= micro[n] <= st.microbatch_limit:
            problems.append(f"cluster {n}: {int(micro[n])} micro-batches, allowed 1..{st.microbatch_limit}")
    bad = np.argwhere(
        (delta < 0)
        | (beta < 0)
        | (power < 0)
        | (power > sc.max_power_w * (1 + 1e-9))
        | ((delta > 0) & (rate <= 0))
        | ((delta > 0) & ~state.available)
        | (memory > sc.memory_bytes)
    )
    for n, k in bad:
        name = device_id(int(n), int(k))
        if delta[n, k] < 0 or beta[n, k] < 0 or power[n, k] < 0:
            problems.append(f"{name}: negative blocks, bandwidth share or power")
        if power[n, k] > sc.max_power_w[n, k] * (1 + 1e-9):
            problems.append(f"{name}: power {power[n, k]:.4g} W exceeds p_max {sc.max_power_w[n, k]:.4g} W")
        if delta[n, k] > 0 and rate[n, k] <= 0:
            problems.append(f"{name}: holds {int(delta[n, k])} blocks but has no bandwidth or power")
        if delta[n, k] > 0 and not state.available[n, k]:
            problems.append(f"{name}: unavailable this round but holds {int(delta[n, k])} blocks")
        if memory[n, k] > sc.memory_bytes[n, k]:
            problems.append(
                f"{name}: needs {memory[n, k] / 2**20:.1f} MiB, has {sc.memory_bytes[n, k] / 2**20:.1f} MiB"
            )
    return problems
