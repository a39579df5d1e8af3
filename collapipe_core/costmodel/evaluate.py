"""The cost model's figures of one round under one decision: latency, energy and memory per device,
the objective and every violated constraint (docs/system-model.md).

Every formula is :mod:`~collapipe_core.costmodel.closed_form`'s (the schedulers minimise the same
functions); this module assembles them per device and per round. A pipeline decision's iteration is
GPipe's closed form, or the discrete-event schedule of :mod:`~collapipe_core.costmodel.chain` for 1F1B;
a replicated decision (the ``fl`` baseline) is :mod:`~collapipe_core.costmodel.replicated`'s. Per round
and device: compute time I·M·((1 + ρ)·δ·a + δ·x) (x: a recomputing device's forward again), transmit time
I·M·2·(P·u + τ), the gather and the moved state's upload; idle time is the rest of the device's I
iterations. The devices that recompute are the decision's under ``training.activation_checkpointing``
``auto``, every scheduled one under ``all``
(:meth:`~collapipe_core.costmodel.problem.RoundProblem.recompute_of`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from collapipe_core.costmodel.chain import cluster_stages
from collapipe_core.costmodel.closed_form import (
    convergence_terms,
    device_energy_j,
    gather_s,
    gpipe_makespan,
    redistribution,
    round_latency,
    stage_times,
)
from collapipe_core.costmodel.evaluation import Evaluation
from collapipe_core.costmodel.problem import RoundProblem, build_problem, link_rate_bps
from collapipe_core.costmodel.replicated import evaluate_replicated
from collapipe_core.costmodel.timeline import simulate
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray, IntArray, device_id

if TYPE_CHECKING:  # the state is built on this package's profile
    from collapipe_core.state import RoundState


def evaluate(state: RoundState, decision: Decision) -> Evaluation:
    """Model the round: latency, energy, memory per device, the objective and every violated constraint."""
    delta = decision.num_blocks()
    check_shape(state, delta)
    pr = build_problem(state)
    pr = pr.with_recompute(pr.recompute_of(delta, decision.recompute()))
    if decision.mode == "replicated":
        return evaluate_replicated(state, pr, decision)
    beta, power, micro = decision.bandwidth_share(), decision.power_w(), decision.num_microbatches()
    iters = pr.iterations
    sched = delta > 0
    rate = link_rate_bps(beta, power, state.gain, pr.bandwidth_hz, pr.noise_w_per_hz)
    with np.errstate(divide="ignore"):
        u = np.where(sched, 1.0 / np.where(rate > 0, rate, 0.0), 0.0)
    times = stage_times(pr, delta, micro, u)
    if pr.schedule == "gpipe":
        pipeline = gpipe_makespan(pr, delta, micro, u)
    else:  # 1F1B has no closed form: the discrete-event schedule gives the makespan
        pipeline = np.array(
            [
                simulate(cluster_stages(times, decision, n), int(micro[n]), "1f1b").makespan_s
                for n in range(len(micro))
            ]
        )
    moves = redistribution(pr, delta, u)
    gather = gather_s(pr, delta, u)
    training = iters * pipeline
    latency = float(round_latency(pr, moves.latency_s + training, gather))
    moves_latency = latency - float(round_latency(pr, moves.latency_without_moves_s + training, gather))

    per_round = iters * micro[:, None]
    compute = per_round * (times.device_forward_s + times.device_backward_s)
    transmit = per_round * 2.0 * times.device_send_s
    device_gather = np.where(sched, delta * pr.block_bits * u + pr.link_latency_s, 0.0)
    comm = transmit + device_gather + moves.upload_s
    idle = np.where(sched, np.maximum(iters * pipeline[:, None] - compute - transmit, 0.0), 0.0)
    energy = device_energy_j(pr, delta, micro, u, power) + moves.upload_energy_j
    memory = np.where(sched, pr.memory_bytes_of(delta, sched, micro), 0.0)
    count = sched.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        busy = compute.sum(axis=1) / (count * iters * pipeline)
    convergence, obj_convergence = convergence_terms(pr, latency, float(micro.sum()))
    obj_latency = pr.V * latency
    obj_energy = float(np.sum(state.queues * energy))
    return Evaluation(
        latency_s=latency,
        aggregation_s=float(np.max(gather)) + pr.upload_s,
        pipeline_s=pipeline,
        redistribution=moves,
        moves_latency_s=moves_latency,
        bubble_fraction=np.where(count > 0, 1.0 - busy, 1.0),
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
        violations=tuple(_violations(state, pr, delta, beta, power, micro, rate, memory)),
    )


def check_shape(state: RoundState, delta: IntArray) -> None:
    if delta.shape != state.scenario.shape:
        raise ValueError(
            f"decision covers {delta.shape[0]}×{delta.shape[1] if delta.ndim > 1 else 0} devices, "
            f"the network has {state.scenario.shape[0]}×{state.scenario.shape[1]}"
        )


def _violations(
    state: RoundState,
    pr: RoundProblem,
    delta: IntArray,
    beta: FloatArray,
    power: FloatArray,
    micro: IntArray,
    rate: FloatArray,
    memory: FloatArray,
) -> list[str]:
    """Every violated constraint, each naming the device or cluster and the amounts."""
    sc = state.scenario
    problems: list[str] = []
    blocks = pr.num_blocks
    for n in range(sc.num_clusters):
        if int(delta[n].sum()) != blocks:
            problems.append(
                f"cluster {n}: segments hold {int(delta[n].sum())} blocks, the encoder has {blocks}"
            )
        if beta[n].sum() > 1.0 + 1e-9:
            problems.append(f"cluster {n}: bandwidth shares sum to {beta[n].sum():.6g} > 1")
        wrong = pr.microbatch_problem(int(micro[n]))
        if wrong is not None:
            problems.append(f"cluster {n}: {wrong}")
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


MEMORY_PARTS = ("weights", "gradients", "optimizer_state", "activations", "runtime")


def memory_parts(state: RoundState, decision: Decision, ev: Evaluation) -> dict[str, FloatArray]:
    """Each device's modeled memory (``ev.memory_bytes``, (N, K)) by part: its TEBs' ``weights`` as stored
    (a frozen base at the training precision, trainable ones fp32), the trainable ones' ``gradients`` and
    ``optimizer_state``, the ``runtime`` overhead, and ``activations``: the rest of the formula, what
    the in-flight micro-batches keep for backward, the working set of one TEB's backward and the receive
    buffers. The parts sum to the device's memory; 0 on devices that hold no TEB."""
    prof = state.profile
    delta = decision.num_blocks().astype(np.float64)
    on = delta > 0
    weights = np.where(on, delta * prof.block_weight_bytes, 0.0)
    gradients = np.where(on, delta * prof.block_gradient_bytes, 0.0)
    optimizer = np.where(on, delta * prof.block_optimizer_bytes, 0.0)
    runtime = np.where(on, state.scenario.runtime_overhead_bytes, 0.0)
    rest = np.where(on, ev.memory_bytes - weights - gradients - optimizer - runtime, 0.0)
    return {
        "weights": weights,
        "gradients": gradients,
        "optimizer_state": optimizer,
        "activations": rest,
        "runtime": runtime,
    }
