"""The baselines: feasible where the round allows, deterministic, and doing what their names say."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import evaluate
from collapipe_core.scheduler import dssda, get_policy, policy_names
from collapipe_core.state import observe
from tests.core.scheduler.instances import environment, random_instance

NEW = ("proportional", "random", "fl", "split", "myopic", "dssda", "optimal")


def test_every_policy_is_registered() -> None:
    assert set(NEW) <= set(policy_names())


@pytest.mark.parametrize(("name", "seeds"), [("proportional", 60), ("random", 60), ("myopic", 12)])
def test_pipeline_baselines_are_feasible_whenever_some_placement_fits(name: str, seeds: int) -> None:
    for seed in range(seeds):
        state = random_instance(seed)
        try:
            dssda.check_memory(dssda.build_problem(state))
        except ValueError:
            continue
        ev = evaluate(state, get_policy(name).decide(state))
        assert ev.feasible, (name, seed, ev.violations)


def test_fl_and_split_are_feasible_when_a_device_holds_the_whole_encoder() -> None:
    env = environment(
        network={"num_clusters": 2, "devices_per_cluster": 3, "memory_bytes": {"low": 2e9, "high": 4e9}}
    )
    for t in range(5):
        state = observe(env, t)
        for name in ("fl", "split"):
            assert evaluate(state, get_policy(name).decide(state)).feasible


def test_random_is_deterministic_per_round_and_varies_across_rounds() -> None:
    env = environment(
        network={"num_clusters": 2, "devices_per_cluster": 4, "memory_bytes": {"low": 2e9, "high": 4e9}}
    )
    first = get_policy("random").decide(observe(env, 3))
    again = get_policy("random").decide(observe(env, 3, np.ones(env.scenario.shape)))
    other = get_policy("random").decide(observe(env, 4))
    assert first == again
    assert first != other


def test_proportional_gives_faster_devices_more_blocks() -> None:
    env = environment(
        network={"num_clusters": 1, "devices_per_cluster": 4, "memory_bytes": {"low": 2e9, "high": 4e9}},
        model={"num_blocks": 12},
    )
    state = observe(env, 0)
    delta = get_policy("proportional").decide(state).num_blocks()[0]
    speed = state.scenario.flops_per_s[0]
    assert delta.sum() == 12
    assert np.all(np.abs(delta - 12 * speed / speed.sum()) < 1.0 + 1e-9)  # largest remainder
    assert delta[np.argmax(speed)] == delta.max()


def test_split_puts_the_encoder_on_the_fastest_device_that_fits_with_one_microbatch() -> None:
    env = environment(
        network={"num_clusters": 1, "devices_per_cluster": 4, "memory_bytes": {"low": 2e9, "high": 4e9}}
    )
    state = observe(env, 0)
    decision = get_policy("split").decide(state)
    delta = decision.num_blocks()[0]
    assert (
        np.count_nonzero(delta) == 1
        and delta[np.argmax(state.scenario.flops_per_s[0])] == state.profile.num_blocks
    )
    assert decision.num_microbatches().tolist() == [1]
    assert decision.bandwidth_share()[0].sum() == pytest.approx(1.0)


def test_fl_trains_the_whole_encoder_on_every_device_and_needs_more_memory_than_the_pipeline() -> None:
    env = environment(
        network={"num_clusters": 2, "devices_per_cluster": 4, "memory_bytes": {"low": 2e9, "high": 4e9}}
    )
    state = observe(env, 0)
    fl = get_policy("fl").decide(state)
    assert fl.mode == "replicated"
    assert np.all(fl.num_blocks() == state.profile.num_blocks)
    fl_memory = evaluate(state, fl).memory_bytes.max(axis=1)
    # at the same (configured) M; DSSDA may trade memory for fewer link stages (one device, large M)
    for name in ("uniform", "proportional"):
        pipe_memory = evaluate(state, get_policy(name).decide(state)).memory_bytes.max(axis=1)
        assert np.all(fl_memory > pipe_memory), name


def test_fl_leaves_out_devices_that_cannot_hold_the_encoder() -> None:
    env = environment(
        network={"num_clusters": 1, "devices_per_cluster": 4, "memory_bytes": {"low": 72e6, "high": 95e6}},
        model={"d_model": 64, "num_blocks": 6},
    )
    state = observe(env, 0)
    decision = get_policy("fl").decide(state)
    ev = evaluate(state, decision)
    assert ev.feasible
    assert 0 < np.count_nonzero(decision.num_blocks()) < 4
