"""The round's latency, energy and objective in closed form, batched over decisions: the one place the
system model's formulas are written (docs/system-model.md). :func:`~collapipe_core.costmodel.evaluate`
and every scheduler evaluate decisions with these functions.

For cluster n and device k (arrays (..., N, K)), per micro-batch (the constants of
:mod:`~collapipe_core.costmodel.problem` at the cluster's M: a_k, ρ, P, τ, S0, c_F, c_B) and with
u_k = 1/r_k (seconds per bit), r_k = β_k·W·log2(1 + p_k·h_k/(β_k·W·N0)), a decision (δ, M, β, p) costs

    T^pipe_n = S0 + Σ_{δ_k>0} ((1 + ρ)·δ_k·a_k + δ_k·x_k + 2·(P·u_k + τ))
               + (M_n − 1)·[max(c_F, max_k max(δ_k·a_k, P·u_k + τ))
                            + max(c_B, max_k max(δ_k·(ρ·a_k + x_k), P·u_k + τ))]
    R_n      = U + [max_k out_k·B_opt·u'_k + τ] + max_{δ_k>0} (δ_k·B + g_k·B_0 + in_k·B_opt)·u_k + τ
    A_n      = U + max_{δ_k>0} δ_k·B·u_k + τ
    E_k      = M_n·δ_k·(e_k + e'_k) + p_k·u_k·(2·I·M_n·P + δ_k·B) + p'_k·out_k·B_opt·u'_k
    T        = max_n (R_n + I·T^pipe_n) + max_n A_n
    J        = penalty(T, Σ_n M_n) + Σ_k Q_k·E_k,   penalty = V·(T + λ·σ²/B_step)     (``variance``)
                                                           or V·T·(1 + B_noise/B_step)  (``noise_scale``)

with U the averaged model's transfer (edge server → CU at the CU's uplink rate, and the CU's upload for
FedAvg: the trainable tensors of the embedding and the TEBs), B_step the samples of a step over every
cluster (b·Σ_n M_n, or N·B with a fixed batch), B a TEB's trainable tensors (all its weights without
adapters; with LoRA only the adapters cross FedAvg), B_0 its frozen weights (0 without adapters) and g_k
the TEBs device k holds that it did not hold in the previous round (all of them in the first round). x_k
and e'_k are a recomputing device's extra backward time and energy per TEB (0 elsewhere; problem module).

- T^pipe is GPipe's makespan, Σ_i F_i + (M − 1)·max_i F_i + Σ_i B_i + (M − 1)·max_i B_i over the chain's
  compute and link stages: CU → link → device → link → … → device → link → edge server. Device k sends
  activations downstream and input gradients upstream on its own link; the CU's forward link and the edge
  server's gradient downlink run at fixed configured rates. 1F1B has no closed form: its makespan comes
  from the discrete-event schedule of :mod:`~collapipe_core.costmodel.timeline` (over these stage times).
- R_n is the redistribution before the first iteration: the edge server sends the averaged model to the CU
  (U); the previous holders of the TEBs whose holder changes upload their optimizer state to the CU over
  their previous links u', p' (the bracket, only when some TEB moves); then the CU sends each scheduled
  device its TEBs' trainable tensors, the frozen weights of the TEBs it gains and the moved state, the
  links in parallel (FDMA). in_k, out_k: the TEBs
  device k gains and loses against the previous round's placement (:func:`moved_blocks`; 0 without one).
- A_n is the aggregation: each scheduled device sends its segment to the CU, which uploads the cluster's
  model. Energy is charged for the airtime of transmissions (not for τ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collapipe_core.costmodel.problem import MicroCosts, RoundProblem, holdings, penalty_terms
from collapipe_core.network import BoolArray, FloatArray, IntArray


@dataclass(frozen=True, eq=False)
class StageTimes:
    """Per micro-batch times of every stage of every cluster's chain (seconds), (..., N, K) and (..., N)."""

    device_forward_s: FloatArray  # δ_k·a_k
    device_backward_s: FloatArray  # δ_k·(ρ·a_k + x_k)
    device_send_s: FloatArray  # P·u_k + τ: one payload over the device's own link (0 when unscheduled)
    airtime_s: FloatArray  # P·u_k: the part of a send the radio transmits (0 when unscheduled)
    cu_forward_s: FloatArray
    cu_backward_s: FloatArray
    edge_forward_s: FloatArray
    edge_backward_s: FloatArray
    cu_link_s: FloatArray  # CU → first device (activations)
    edge_link_s: FloatArray  # edge server → last device (gradients)


def stage_times(
    pr: RoundProblem, delta: IntArray, micro: npt.ArrayLike, time_per_bit: FloatArray
) -> StageTimes:
    """The stage times of decisions δ (..., N, K), M (..., N) with links u = 1/r (..., N, K)."""
    on = delta > 0
    mc = pr.micro_costs(micro)
    forward = delta * mc.compute_s
    airtime = np.where(on, np.asarray(mc.payload_bits)[..., None] * np.where(on, time_per_bit, 0.0), 0.0)
    lead = np.shape(delta)[:-1]
    rates = (pr.cu_flops_per_s, pr.cu_flops_per_s, pr.edge_flops_per_s, pr.edge_flops_per_s)
    cu_f, cu_b, edge_f, edge_b = (
        np.broadcast_to(np.asarray(mc.samples) * f / r, lead)
        for f, r in zip(pr.chain_flops, rates, strict=True)
    )
    payload = np.asarray(mc.payload_bits)
    return StageTimes(
        device_forward_s=forward,
        device_backward_s=mc.backward_s(delta),
        device_send_s=np.where(on, airtime + pr.link_latency_s, 0.0),
        airtime_s=airtime,
        cu_forward_s=cu_f,
        cu_backward_s=cu_b,
        edge_forward_s=edge_f,
        edge_backward_s=edge_b,
        cu_link_s=np.broadcast_to(payload / pr.cu_link_rate_bps + pr.link_latency_s, lead),
        edge_link_s=np.broadcast_to(payload / pr.edge_downlink_rate_bps + pr.link_latency_s, lead),
    )


def gpipe_makespan(
    pr: RoundProblem,
    delta: IntArray,
    micro: npt.ArrayLike,
    time_per_bit: FloatArray,
    micro_costs: MicroCosts | None = None,
) -> FloatArray:
    """T^pipe_n (..., N) of GPipe for δ (..., N, K), M (..., N), u (..., N, K) (module docstring);
    ``micro_costs``: ``pr.micro_costs(micro)`` when the caller has it."""
    on = delta > 0
    m = np.asarray(micro, dtype=np.float64)
    mc = pr.micro_costs(micro) if micro_costs is None else micro_costs
    u = np.where(on, time_per_bit, 0.0)
    compute = delta * mc.compute_s  # δ_k·a_k
    link = np.asarray(mc.payload_bits)[..., None] * u  # P·u_k
    if pr.link_latency_s:
        link = link + pr.link_latency_s
    backward = mc.backward_s(delta)
    stage_f = np.max(np.where(on, np.maximum(compute, link), 0.0), axis=-1)
    stage_b = np.max(np.where(on, np.maximum(backward, link), 0.0), axis=-1)
    pipeline: FloatArray = (
        mc.chain_sum_s
        + np.sum(np.where(on, compute + backward + 2.0 * link, 0.0), axis=-1)
        + (m - 1.0)
        * (np.maximum(mc.chain_max_forward_s, stage_f) + np.maximum(mc.chain_max_backward_s, stage_b))
    )
    return pipeline


def gpipe_parts(times: StageTimes, micro: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """GPipe's makespan T^pipe_n (..., N) split into the time of its compute stages and of its link
    stages: each stage's own times, and the (M − 1)·max of each direction to the kind of stage that sets
    it. The two parts sum to :func:`gpipe_makespan`'s T^pipe_n (for the explanation of decisions)."""
    m = np.asarray(micro, dtype=np.float64)
    on = times.device_forward_s > 0
    zero = np.zeros(m.shape)
    fwd_c = np.maximum(
        np.maximum(times.cu_forward_s, times.edge_forward_s), np.max(times.device_forward_s, axis=-1)
    )
    bwd_c = np.maximum(
        np.maximum(times.cu_backward_s, times.edge_backward_s), np.max(times.device_backward_s, axis=-1)
    )
    sends = np.max(np.where(on, times.device_send_s, 0.0), axis=-1)
    fwd_l, bwd_l = np.maximum(times.cu_link_s, sends), np.maximum(times.edge_link_s, sends)
    compute = (
        times.cu_forward_s
        + times.cu_backward_s
        + times.edge_forward_s
        + times.edge_backward_s
        + np.sum(times.device_forward_s + times.device_backward_s, axis=-1)
        + (m - 1.0) * (np.where(fwd_c >= fwd_l, fwd_c, zero) + np.where(bwd_c >= bwd_l, bwd_c, zero))
    )
    links = (
        times.cu_link_s
        + times.edge_link_s
        + 2.0 * np.sum(times.device_send_s, axis=-1)
        + (m - 1.0) * (np.where(fwd_c >= fwd_l, zero, fwd_l) + np.where(bwd_c >= bwd_l, zero, bwd_l))
    )
    return compute, links


def moved_blocks(
    pr: RoundProblem, delta: IntArray, replicated: bool = False
) -> tuple[FloatArray, FloatArray]:
    """(in_k, out_k) (..., N, K) for placements δ (..., N, K) after the previous round's: the TEBs device k
    holds now that it did not and another device did (in), and those whose state device k sends, as their
    first previous holder (out). Segments are contiguous in device order; a replicated placement's
    participants hold every TEB (0 without a previous round)."""
    before = pr.previous
    if before is None:
        return np.zeros(delta.shape), np.zeros(delta.shape)
    k, blocks = delta.shape[-1], before.held.shape[-1]
    devices = np.arange(k)[:, None]
    if replicated:
        gained = (
            (delta > 0)[..., None] & ~before.held & before.held.any(axis=-2, keepdims=True)
        )  # (..., N, K, L)
        moved: BoolArray = np.asarray(gained.any(axis=-2))  # (..., N, L)
        into = gained.sum(axis=-1)
    else:
        ends = np.cumsum(np.maximum(delta, 0), axis=-1)  # (..., N, K)
        now = np.minimum(np.sum(ends[..., :, None] <= np.arange(blocks), axis=-2), k - 1)  # (..., N, L)
        had = np.take_along_axis(
            np.broadcast_to(before.held, (*now.shape[:-1], k, blocks)), now[..., None, :], -2
        )
        placed = np.asarray(np.arange(blocks) < ends[..., -1:])  # Σ δ < L (infeasible) leaves TEBs unheld
        moved = np.asarray((before.sender >= 0) & ~had[..., 0, :] & placed)  # its new device lacked it
        into = np.sum(moved[..., None, :] & (now[..., None, :] == devices), axis=-1)
    out = np.sum(moved[..., None, :] & (before.sender[..., None, :] == devices), axis=-1)
    return into.astype(np.float64), out.astype(np.float64)


def gained_blocks(pr: RoundProblem, delta: IntArray, replicated: bool = False) -> FloatArray:
    """g_k (..., N, K): the TEBs device k holds under δ (..., N, K) that it did not hold in the previous
    round (all it holds without one): those whose frozen weights it receives."""
    now = holdings(delta, replicated, pr.num_blocks)  # (..., N, K, L)
    new = now if pr.previous is None else now & ~pr.previous.held
    gained: FloatArray = np.sum(new, axis=-1).astype(np.float64)
    return gained


@dataclass(frozen=True, eq=False)
class Redistribution:
    """The redistribution phase of decisions (seconds, joules; counts of TEBs), (..., N, K) and (..., N)."""

    model_s: float  # U: the averaged model, edge server → CU
    moved_in: FloatArray  # in_k: TEBs whose optimizer state device k receives
    moved_out: FloatArray  # out_k: TEBs whose optimizer state device k sends
    upload_s: FloatArray  # out_k·B_opt·u'_k (+ τ where it sends)
    upload_energy_j: FloatArray  # p'_k·out_k·B_opt·u'_k
    download_s: FloatArray  # (δ_k·B + g_k·B_0 + in_k·B_opt)·u_k + τ
    latency_s: FloatArray  # R_n
    latency_without_moves_s: FloatArray  # R_n had no TEB changed device: U + max_k δ_k·B·u_k + τ (+ the
    # frozen weights in the first round)


def redistribution(
    pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray, replicated: bool = False
) -> Redistribution:
    """The redistribution before the first iteration (module docstring) of δ (..., N, K) with links u
    (..., N, K; any value where δ = 0)."""
    into, out = moved_blocks(pr, delta, replicated)
    on = delta > 0
    u = np.where(on, time_per_bit, 0.0)
    tau = pr.link_latency_s
    frozen = gained_blocks(pr, delta, replicated) * pr.frozen_bits if pr.frozen_bits else 0.0
    weights = (delta * pr.block_bits + (frozen if pr.previous is None else 0.0)) * u
    download = (delta * pr.block_bits + frozen + into * pr.optimizer_bits) * u
    if tau:
        weights, download = np.where(on, weights + tau, 0.0), np.where(on, download + tau, 0.0)
    if pr.previous is None:
        sent = np.zeros(delta.shape)
        energy = np.zeros(delta.shape)
    else:
        sent = np.where(out > 0, out * pr.optimizer_bits * pr.previous.time_per_bit, 0.0)
        energy = pr.previous.power_w * sent
        if tau:
            sent = np.where(out > 0, sent + tau, 0.0)
    return Redistribution(
        model_s=pr.upload_s,
        moved_in=into,
        moved_out=out,
        upload_s=sent,
        upload_energy_j=energy,
        download_s=download,
        latency_s=pr.upload_s + np.max(sent, axis=-1) + np.max(download, axis=-1),
        latency_without_moves_s=pr.upload_s + np.max(weights, axis=-1),
    )


def transfers(pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray) -> tuple[FloatArray, FloatArray]:
    """R_n (..., N) and the moved state's upload energy (..., N, K) (:func:`redistribution`'s)."""
    moves = redistribution(pr, delta, time_per_bit)
    return moves.latency_s, moves.upload_energy_j


def gather_s(pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray) -> FloatArray:
    """The aggregation's gather per cluster, max_k δ_k·B·u_k + τ (..., N) (u: 0 where δ = 0)."""
    gather: FloatArray = np.max(delta * pr.block_bits * time_per_bit, axis=-1)
    if pr.link_latency_s:
        gather = gather + pr.link_latency_s
    return gather


def device_energy_j(
    pr: RoundProblem,
    delta: IntArray,
    micro: npt.ArrayLike,
    time_per_bit: FloatArray,
    power: FloatArray,
    micro_costs: MicroCosts | None = None,
) -> FloatArray:
    """E_k (..., N, K) without the moved state's upload (``micro_costs`` as for :func:`gpipe_makespan`):
    M_n·δ_k·(e_k + e'_k) + p_k·u_k·(2·I·M_n·P + δ_k·B)."""
    on = delta > 0
    m = np.asarray(micro, dtype=np.float64)
    mc = pr.micro_costs(micro) if micro_costs is None else micro_costs
    u = np.where(on, time_per_bit, 0.0)
    bits = 2.0 * pr.iterations * m[..., None] * np.asarray(mc.payload_bits)[..., None] + delta * pr.block_bits
    per_block = mc.energy_per_block_j()
    energy: FloatArray = np.where(on, m[..., None] * delta * per_block + power * u * bits, 0.0)
    return energy


@dataclass(frozen=True, eq=False)
class Costs:
    """The closed-form figures of a batch of decisions (leading dims ``...``)."""

    train_s: FloatArray  # (..., N) R_n + I·T^pipe_n: the redistribution, then the iterations
    latency_s: FloatArray  # (...) T = max_n (R_n + I·T^pipe_n) + max_n A_n
    gather_s: FloatArray  # (..., N) max_k δ_k·B·u_k + τ (A_n without the upload)
    energy_j: FloatArray  # (..., N, K) E_k
    objective: FloatArray  # (...) J


def costs(
    pr: RoundProblem, delta: IntArray, micro: IntArray, time_per_bit: FloatArray, power: FloatArray
) -> Costs:
    """The model's figures for δ (..., N, K), M (..., N), u = 1/r (..., N, K; any value where δ = 0), p."""
    u = np.where(delta > 0, time_per_bit, 0.0)
    mc = pr.micro_costs(micro)
    pipeline = gpipe_makespan(pr, delta, micro, u, mc)
    gather = gather_s(pr, delta, u)
    redistribution, move_energy = transfers(pr, delta, u)
    energy = device_energy_j(pr, delta, micro, u, power, mc) + move_energy
    weighted = np.sum(pr.queues * energy, axis=-1)
    train = redistribution + pr.iterations * pipeline
    latency = round_latency(pr, train, gather)
    objective = round_objective(pr, train, gather, weighted, np.asarray(micro, dtype=np.float64), latency)
    return Costs(train, latency, gather, energy, objective)


def round_objective(
    pr: RoundProblem,
    train_s: FloatArray,
    gather_s: FloatArray,
    queued_energy: FloatArray,
    micro: FloatArray,
    latency_s: FloatArray | None = None,
) -> FloatArray:
    """J from per-cluster figures (..., N): R_n + I·T^pipe_n, the gather time, Σ_k Q_k·E_k and M_n:
    J = penalty(T, Σ_n M_n) + Σ_n Σ_k Q_k·E_k with T = max_n (R_n + I·T^pipe_n) + U + max_n gather_n
    (:func:`round_latency`; ``latency_s`` when the caller has it).

    The solver steps that couple clusters (the micro-batch step, the cluster choice) score with this."""
    latency = round_latency(pr, train_s, gather_s) if latency_s is None else latency_s
    value: FloatArray = penalty(pr, latency, np.sum(micro, axis=-1)) + np.sum(queued_energy, axis=-1)
    return value


def round_latency(pr: RoundProblem, train_s: FloatArray, gather_s: FloatArray) -> FloatArray:
    """T = max_n (R_n + I·T^pipe_n) + U + max_n gather_n from per-cluster figures (..., N)."""
    latency: FloatArray = np.max(train_s, axis=-1) + np.max(gather_s, axis=-1) + pr.upload_s
    return latency


def penalty(pr: RoundProblem, latency_s: FloatArray, total_micro: FloatArray) -> FloatArray:
    """The drift-plus-penalty's penalty of a round of latency T training Σ_n M_n micro-batches per cluster
    step (:func:`~collapipe_core.costmodel.problem.penalty_terms`): V·(T + λ·σ²/B_step) (``variance``) or
    V·T·(1 + B_noise/B_step) (``noise_scale``). Non-decreasing in T and non-increasing in Σ M."""
    _, part = penalty_terms(
        pr.convergence,
        pr.V,
        pr.lambda_,
        pr.gradient_variance,
        pr.noise_scale,
        pr.step_samples(total_micro),
        latency_s,
    )
    out: FloatArray = pr.V * latency_s + part
    return out


def convergence_terms(pr: RoundProblem, latency_s: float, total_micro: float) -> tuple[float, float]:
    """(G, its part of the penalty) of one round of latency T training Σ_n M_n micro-batches."""
    g, part = penalty_terms(
        pr.convergence,
        pr.V,
        pr.lambda_,
        pr.gradient_variance,
        pr.noise_scale,
        pr.step_samples(total_micro),
        latency_s,
    )
    return float(g), float(part)


def latency_factor(pr: RoundProblem, total_micro: npt.ArrayLike) -> FloatArray:
    """The penalty's weight of the latency at Σ_n M_n, relative to V: 1 (``variance``) or
    1 + B_noise/B_step (``noise_scale``); the link step and the segment DP scale their weights by it."""
    total = np.asarray(total_micro, dtype=np.float64)
    if pr.V <= 0:
        return np.ones(total.shape)
    out: FloatArray = (
        penalty(pr, np.ones(total.shape), total) - penalty(pr, np.zeros(total.shape), total)
    ) / pr.V
    return out
