"""The modeled round: closed forms, the timeline's agreement, memory under both schedules."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import evaluate, link_rate_bps
from collapipe_core.costmodel.chain import cluster_round_timeline
from collapipe_core.decision import Decision
from collapipe_core.scheduler import get_policy
from collapipe_core.state import build_environment, observe
from tests.core.builders import tiny_config


def _state(schedule: str = "gpipe", round_index: int = 0, **sections: object):  # type: ignore[no-untyped-def]
    config = tiny_config(training={"schedule": schedule}, **sections)
    return observe(build_environment(config, 40, 2, None), round_index)


def _random_decision(state, rng: np.random.Generator) -> Decision:  # type: ignore[no-untyped-def]
    n, k = state.scenario.shape
    blocks = state.profile.num_blocks
    delta = np.stack([rng.multinomial(blocks, np.ones(k) / k) for _ in range(n)])
    beta = rng.dirichlet(np.ones(k), n) * (delta > 0)
    power = rng.uniform(0.01, 1.0, (n, k)) * state.scenario.max_power_w * (delta > 0)
    return Decision.from_arrays(delta, beta, power, rng.integers(1, 5, n))


def test_rate_is_shannon_capacity() -> None:
    rate = link_rate_bps(np.array([0.5, 0.0]), np.array([0.1, 0.1]), np.array([1e-9, 1e-9]), 1e6, 4e-21)
    expected = 0.5e6 * np.log2(1 + 0.1 * 1e-9 / (0.5e6 * 4e-21))
    assert rate[0] == pytest.approx(expected)
    assert rate[1] == 0.0


def test_gpipe_closed_form_equals_the_discrete_event_timeline_on_random_decisions() -> None:
    rng = np.random.default_rng(7)
    state = _state()
    for _ in range(200):
        decision = _random_decision(state, rng)
        ev = evaluate(state, decision)
        for n in range(state.scenario.num_clusters):
            timeline = cluster_round_timeline(state, decision, n)
            assert timeline.makespan_s == pytest.approx(ev.pipeline_s[n], rel=1e-9)


def test_1f1b_latency_is_its_timeline_and_keeps_less_activation_memory() -> None:
    gpipe, one_f_one_b = _state("gpipe"), _state("1f1b")
    decision = Decision.from_arrays([[2, 1, 1], [1, 2, 1]], np.full((2, 3), 1 / 3), np.full((2, 3), 0.1), 4)
    ev_g, ev_1 = evaluate(gpipe, decision), evaluate(one_f_one_b, decision)
    for n in range(2):
        timeline = cluster_round_timeline(one_f_one_b, decision, n)
        assert ev_1.pipeline_s[n] == pytest.approx(timeline.makespan_s)
    # C = 5 compute stages, device i ∈ {1,2,3} keeps min(5 − i, 4) < 4 micro-batches except the first
    assert np.all(ev_1.memory_bytes <= ev_g.memory_bytes)
    assert np.all(ev_1.memory_bytes[:, 1:] < ev_g.memory_bytes[:, 1:])


def test_energy_and_memory_follow_the_documented_formulas() -> None:
    state = _state()
    decision = get_policy("uniform").decide(state)
    ev = evaluate(state, decision)
    sc, prof, st = state.scenario, state.profile, state.settings
    delta = decision.num_blocks()
    micro = decision.num_microbatches()[:, None]
    flops = st.local_iterations * micro * delta * st.microbatch_size * 3 * prof.block_forward_flops
    compute_energy = sc.kappa * sc.cpu_hz**2 * flops / sc.flops_per_cycle
    assert np.allclose(ev.energy_j - decision.power_w() * ev.comm_s, compute_energy)
    in_flight, b = micro, st.microbatch_size  # GPipe keeps all M
    memory = (
        delta * prof.block_state_bytes
        + (in_flight * delta + 1)
        * b
        * prof.block_activation_bytes  # + one micro-batch's backward working set
        + 2 * micro * b * prof.payload_bytes  # receive buffers: activation and gradient per micro-batch
    )
    assert np.allclose(ev.memory_bytes, np.where(delta > 0, memory + sc.runtime_overhead_bytes, 0))
    assert ev.objective == pytest.approx(
        ev.objective_latency + ev.objective_convergence + ev.objective_energy
    )
    assert ev.convergence == pytest.approx(st.gradient_variance / (st.microbatch_size * micro.sum()))


def test_queues_weigh_energy_in_the_objective() -> None:
    config = tiny_config()
    env = build_environment(config, 40, 2, None)
    decision = get_policy("uniform").decide(observe(env, 0))
    empty = evaluate(observe(env, 0), decision)
    loaded = evaluate(observe(env, 0, np.full(env.scenario.shape, 10.0)), decision)
    assert loaded.objective_energy == pytest.approx(10.0 * empty.energy_j.sum())
    assert loaded.objective == pytest.approx(empty.objective + loaded.objective_energy)


def test_violations_name_the_device_and_the_amount() -> None:
    state = _state()
    blocks = [[4, 0, 0], [3, 0, 0]]  # cluster 1 is one block short
    decision = Decision.from_arrays(blocks, [[0.7, 0.6, 0.0], [1.0, 0, 0]], [[9.0, 0.1, 0.0], [0.1, 0, 0]], 2)
    problems = "\n".join(evaluate(state, decision).violations)
    assert "cluster 1: segments hold 3 blocks, the encoder has 4" in problems
    assert "cluster 0: bandwidth shares sum to 1.3" in problems
    assert "c0-d0: power 9 W exceeds p_max" in problems


def test_more_microbatches_lengthen_the_pipeline_and_shrink_the_convergence_term() -> None:
    state = _state()
    base = get_policy("uniform").decide(state)
    evs = []
    for m in (1, 2, 4):
        d = Decision.from_arrays(base.num_blocks(), base.bandwidth_share(), base.power_w(), m)
        evs.append(evaluate(state, d))
    assert evs[0].pipeline_s[0] < evs[1].pipeline_s[0] < evs[2].pipeline_s[0]
    assert evs[0].convergence > evs[1].convergence > evs[2].convergence
