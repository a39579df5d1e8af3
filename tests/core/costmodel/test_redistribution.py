"""Redistribution before a round's first iteration: the averaged model, the segments' weights and the
optimizer state of the TEBs that change device, charged by the documented formulas.

Expected figures are computed here from the formulas (bits of a TEB from its parameter count, the
CU's uplink rate, the previous round's rates and powers), not by calling the cost model's helpers."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import build_problem, evaluate
from collapipe_core.costmodel.closed_form import moved_blocks
from collapipe_core.costmodel.problem import holdings
from collapipe_core.decision import Decision
from collapipe_core.state import Placement, RoundState, build_environment, observe
from tests.core.builders import tiny_config

# two clusters of three devices, L = 4 TEBs
NOW = np.array([[1, 2, 1], [2, 1, 1]])
# cluster 0: TEBs 1 and 2 go from c0-d0 to c0-d1; cluster 1: TEB 1 from c1-d1 to c1-d0, TEB 2 from
# c1-d2 to c1-d1 (segments are contiguous in device order)
BEFORE = np.array([[3, 0, 1], [1, 1, 2]])
MOVED_OUT = np.array([[2, 0, 0], [0, 1, 1]])
MOVED_IN = np.array([[0, 2, 0], [1, 1, 0]])
PREV_RATE = np.array([[2.0e6, 3.0e6, 4.0e6], [1.0e6, 5.0e5, 2.5e5]])
PREV_POWER = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
OPTIMIZER_COPIES = {"sgd": 0, "momentum": 1, "adamw": 2}


def _state(optimizer: str = "adamw", previous: Placement | None = None) -> RoundState:
    env = build_environment(tiny_config(training={"optimizer": optimizer}), 40, 2, None)
    return observe(env, 1, previous=previous)


def _decision() -> Decision:
    beta = np.full((2, 3), 1 / 3)
    return Decision.from_arrays(NOW, beta, np.full((2, 3), 0.2), 2)


def _before(blocks: np.ndarray = BEFORE) -> Placement:
    return Placement(num_blocks=blocks, rate_bps=PREV_RATE, power_w=PREV_POWER)


def _block_bits(state: RoundState) -> float:
    return 8.0 * state.profile.block_params * 4  # fp32, every weight trained


def _model_s(state: RoundState) -> float:
    prof = state.profile
    params = prof.embedding_params + prof.num_blocks * prof.block_params
    return 8.0 * 4 * params / state.scenario.cu_uplink_rate_bps


def test_without_moves_redistribution_is_the_model_then_each_segment_s_weights() -> None:
    state = _state()
    decision = _decision()
    ev = evaluate(state, decision)
    rate = ev.rate_bps
    expected = _model_s(state) + np.max(NOW * _block_bits(state) / rate, axis=1)
    assert np.allclose(ev.redistribution_s, expected, rtol=1e-12)
    assert list(ev.blocks_moved) == [0, 0] and ev.moves_latency_s == 0.0
    iterations = state.settings.local_iterations * ev.pipeline_s
    assert ev.latency_s == pytest.approx(np.max(expected + iterations) + ev.aggregation_s, rel=1e-12)
    # the segments a device keeps from the round before cost exactly the same
    kept = evaluate(_state(previous=_before(NOW)), decision)
    assert kept.latency_s == ev.latency_s and np.array_equal(kept.energy_j, ev.energy_j)


@pytest.mark.parametrize("optimizer", ["adamw", "momentum", "sgd"])
def test_moving_blocks_costs_exactly_the_modeled_transfer(optimizer: str) -> None:
    decision = _decision()
    still = evaluate(_state(optimizer), decision)
    moved = evaluate(_state(optimizer, _before()), decision)
    state = _state(optimizer)
    bits, opt_bits = _block_bits(state), _block_bits(state) * OPTIMIZER_COPIES[optimizer]
    rate = still.rate_bps

    # the previous holders upload the moved state at their previous rates, then every device
    # receives its weights and the state of the TEBs it gained at its new rate
    upload = MOVED_OUT * opt_bits / PREV_RATE
    download = (NOW * bits + MOVED_IN * opt_bits) / rate
    expected_r = _model_s(state) + upload.max(axis=1) + download.max(axis=1)
    assert np.allclose(moved.redistribution_s, expected_r, rtol=1e-12)
    assert list(moved.blocks_moved) == [2, 2]

    training = state.settings.local_iterations * still.pipeline_s
    without = _model_s(state) + np.max(NOW * bits / rate, axis=1)
    expected_gap = np.max(expected_r + training) - np.max(without + training)
    assert moved.latency_s - still.latency_s == pytest.approx(expected_gap, rel=1e-9, abs=1e-15)
    assert moved.moves_latency_s == pytest.approx(expected_gap, rel=1e-9, abs=1e-15)
    if optimizer != "sgd":
        assert expected_gap > 0

    # the old holders pay p_prev·k_j·B_opt/r_prev_j; nobody else pays anything more
    energy_gap = PREV_POWER * MOVED_OUT * opt_bits / PREV_RATE
    assert np.allclose(moved.energy_j - still.energy_j, energy_gap, rtol=1e-9, atol=1e-18)
    assert np.allclose(moved.comm_s - still.comm_s, upload, rtol=1e-9, atol=1e-18)
    assert np.array_equal(moved.memory_bytes, still.memory_bytes)


def test_a_holder_that_leaves_the_pipeline_still_uploads_its_state() -> None:
    decision = Decision.from_arrays([[0, 3, 1], [2, 1, 1]], np.full((2, 3), 1 / 3), np.full((2, 3), 0.2), 2)
    state = _state()
    still = evaluate(state, decision)
    moved = evaluate(_state(previous=_before(np.array([[3, 0, 1], [2, 1, 1]]))), decision)
    opt_bits = 2 * _block_bits(state)
    assert still.energy_j[0, 0] == 0.0  # c0-d0 holds nothing this round ...
    assert moved.energy_j[0, 0] == pytest.approx(PREV_POWER[0, 0] * 3 * opt_bits / PREV_RATE[0, 0], rel=1e-12)
    assert list(moved.blocks_moved) == [3, 0]


def test_the_objective_weighs_the_moves_latency_and_energy() -> None:
    decision = _decision()
    queues = np.full((2, 3), 4.0)
    env = build_environment(tiny_config(), 40, 2, None)
    still = evaluate(observe(env, 1, queues), decision)
    moved = evaluate(observe(env, 1, queues, _before()), decision)
    gap = moved.objective - still.objective
    v = env.settings.V
    assert gap == pytest.approx(
        v * (moved.latency_s - still.latency_s) + 4.0 * (moved.energy_j - still.energy_j).sum(), rel=1e-9
    )


def test_holders_are_the_contiguous_segments_or_every_teb_for_a_replica() -> None:
    held = holdings(np.array([[2, 0, 1, 1]]), False, 4)
    assert held[0].astype(int).tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    replicas = holdings(np.array([[3, 0, 3]]), True, 3)
    assert replicas[0].astype(int).tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 1]]
    # an infeasible vector claims TEBs past L or a negative count: those hold nothing
    assert holdings(np.array([[3, -1, 3]]), False, 4)[0].sum(axis=1).tolist() == [3, 0, 1]


def _moves(previous: Placement | None, now: list[list[int]], replicated: bool) -> list[list[list[int]]]:
    config = tiny_config(network={"num_clusters": 1, "devices_per_cluster": 3})
    state = observe(build_environment(config, 40, 2, None), 1, previous=previous)
    moved_in, moved_out = moved_blocks(build_problem(state), np.array(now), replicated)
    return [moved_in.astype(int).tolist(), moved_out.astype(int).tolist()]


def test_moves_into_and_out_of_a_replicated_round() -> None:
    pipeline = Placement(num_blocks=np.array([[2, 1, 1]]), rate_bps=np.ones((1, 3)), power_w=np.ones((1, 3)))
    # every participant of the fl round needs the state of the TEBs it did not hold; each holder sends once
    assert _moves(pipeline, [[4, 4, 0]], replicated=True) == [[[2, 3, 0]], [[2, 1, 1]]]
    # after an fl round every TEB had several holders: the first in device order sends it
    replicas = Placement(
        num_blocks=np.array([[0, 4, 4]]), rate_bps=np.ones((1, 3)), power_w=np.ones((1, 3)), mode="replicated"
    )
    assert _moves(replicas, [[2, 1, 1]], replicated=False) == [[[2, 0, 0]], [[0, 2, 0]]]
    assert _moves(None, [[2, 1, 1]], replicated=False) == [[[0, 0, 0]], [[0, 0, 0]]]


def test_a_placement_round_trips_through_json_and_must_match_the_network() -> None:
    before = _before()
    again = Placement.from_json(before.to_json())
    assert np.array_equal(again.num_blocks, BEFORE) and again.num_blocks.dtype == np.int64
    assert np.array_equal(again.rate_bps, PREV_RATE) and np.array_equal(again.power_w, PREV_POWER)
    env = build_environment(tiny_config(), 40, 2, None)
    wrong = Placement(num_blocks=np.ones((3, 3), dtype=np.int64), rate_bps=PREV_RATE, power_w=PREV_POWER)
    with pytest.raises(ValueError, match=r"previous placement's num_blocks has shape \(3, 3\)"):
        observe(env, 1, previous=wrong)
