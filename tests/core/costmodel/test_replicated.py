"""The replicated (``fl``) round model: data-parallel devices, each with the whole encoder."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import evaluate
from collapipe_core.decision import Decision
from collapipe_core.state import observe
from tests.core.scheduler.instances import environment


def _state():  # type: ignore[no-untyped-def]
    env = environment(
        network={"num_clusters": 2, "devices_per_cluster": 3, "memory_bytes": {"low": 2e9, "high": 4e9}},
        model={"num_blocks": 4},
        training={"microbatch_size": 6, "local_iterations": 2},
    )
    return observe(env, 1, np.full(env.scenario.shape, 0.5))


def _decision(state, micro: int = 2) -> Decision:  # type: ignore[no-untyped-def]
    n, k = state.scenario.shape
    delta = np.full((n, k), state.profile.num_blocks)
    delta[1, 2] = 0  # cluster 1 trains on two devices
    on = delta > 0
    beta = np.where(on, 1.0 / on.sum(axis=1, keepdims=True), 0.0)
    return Decision.from_arrays(
        delta, beta, np.where(on, state.scenario.max_power_w, 0.0), micro, mode="replicated"
    )


def test_replicated_round_follows_the_documented_formulas() -> None:
    state = _state()
    decision = _decision(state)
    ev = evaluate(state, decision)
    sc, prof, st = state.scenario, state.profile, state.settings
    L, b, it = prof.num_blocks, st.microbatch_size, st.local_iterations
    share = np.array([[2 * b / 3] * 3, [2 * b / 2] * 2 + [0.0]])
    rate = ev.rate_bps
    on = share > 0
    payload = 8 * prof.payload_bytes
    tx = np.where(on, share * payload / np.where(on, rate, 1.0), 0.0)
    fwd = share * L * prof.block_forward_flops / sc.flops_per_s
    batch = 2 * b
    iteration = (
        batch * prof.embedding_forward_flops / sc.cu_flops_per_s
        + batch * payload / sc.cu_link_rate_bps
        + np.max(np.where(on, fwd + tx, 0), axis=1)
        + batch * (prof.head_forward_flops + prof.head_backward_flops) / sc.edge_flops_per_s
        + batch * payload / sc.edge_downlink_rate_bps
        + np.max(np.where(on, 2 * fwd + tx, 0), axis=1)
        + batch * prof.embedding_backward_flops / sc.cu_flops_per_s
    )
    assert np.allclose(ev.pipeline_s, iteration)
    gather = np.where(on, L * 8 * prof.block_params * 4 / np.where(on, rate, 1.0), 0.0)  # fp32
    upload = 8 * 4 * (prof.embedding_params + prof.encoder_params) / sc.cu_uplink_rate_bps
    assert ev.aggregation_s == pytest.approx(gather.max() + upload)
    # redistribution (no previous round): the averaged model to the CU, then the encoder to each participant
    redistribution = upload + gather.max(axis=1)
    assert np.allclose(ev.redistribution_s, redistribution)
    assert ev.latency_s == pytest.approx(np.max(redistribution + it * iteration) + ev.aggregation_s)
    memory = np.where(
        on,
        L * prof.block_state_bytes + share * L * prof.block_activation_bytes + sc.runtime_overhead_bytes,
        0,
    )
    assert np.allclose(ev.memory_bytes, memory)
    cycles = it * share * L * 3 * prof.block_forward_flops / sc.flops_per_cycle
    energy = np.where(on, sc.kappa * sc.cpu_hz**2 * cycles + sc.max_power_w * (it * 2 * tx + gather), 0)
    assert np.allclose(ev.energy_j, energy)
    assert ev.objective == pytest.approx(
        ev.objective_latency + ev.objective_convergence + ev.objective_energy
    )
    assert ev.feasible


def test_replicated_violations_name_the_problem() -> None:
    state = _state()
    good = _decision(state)
    bad = Decision.from_arrays(
        np.where(good.num_blocks() > 0, 1, 0),
        good.bandwidth_share() * 2,
        good.power_w(),
        2,
        mode="replicated",
    )
    text = " ".join(evaluate(state, bad).violations)
    assert "0 or all 4 TEBs" in text and "bandwidth shares sum" in text


def test_more_microbatches_mean_bigger_shares_and_more_memory() -> None:
    state = _state()
    small, large = evaluate(state, _decision(state, 1)), evaluate(state, _decision(state, 4))
    on = _decision(state).num_blocks() > 0
    assert np.all(large.memory_bytes[on] > small.memory_bytes[on])
    assert large.convergence < small.convergence
