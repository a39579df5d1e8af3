"""Every decision explains itself: the counterfactuals are the cost model's figures of real decisions on the
same round, their differences add up, and the sentence names what decided."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collapipe_core import api
from collapipe_core.costmodel import evaluate
from collapipe_core.decision import Decision
from collapipe_core.explain import concentrated, explain
from collapipe_core.runner import Runner
from collapipe_core.scheduler import get_policy
from collapipe_core.sinks import MemorySink
from tests.core.builders import tiny_config
from tests.core.scheduler.instances import random_instance


def _check_entries(state: api.RoundState, decision: Decision, explanation: dict) -> None:  # type: ignore[type-arg]
    chosen = evaluate(state, decision)
    for entry in explanation["counterfactuals"]:
        if entry["decision"] is None:
            assert entry["note"]
            continue
        other = Decision.from_json(entry["decision"])
        ev = evaluate(state, other)  # the log's figures are the cost model's of that very decision
        assert entry["objective"] == pytest.approx(ev.objective, rel=1e-12)
        assert entry["latency_s"] == pytest.approx(ev.latency_s, rel=1e-12)
        assert entry["feasible"] == ev.feasible
        delta = entry["delta"]
        assert delta["objective"] == pytest.approx(ev.objective - chosen.objective, rel=1e-9, abs=1e-12)
        parts = sum(delta[t] for t in ("compute", "links", "energy", "convergence"))
        assert parts == pytest.approx(delta["objective"], rel=1e-9, abs=1e-9 * abs(chosen.objective))


def test_every_counterfactual_is_the_cost_model_s_figure_of_its_decision() -> None:
    seen: set[str] = set()
    for seed in range(40):
        state = random_instance(seed)
        try:
            decision = get_policy("dssda").decide(state)
        except ValueError:  # a round where no placement fits
            continue
        explanation = explain(state, decision, evaluate(state, decision))
        _check_entries(state, decision, explanation)
        for entry in explanation["counterfactuals"]:
            seen.add(entry["name"])
            if entry["name"] == "spread" and entry["decision"] is not None:
                spread = Decision.from_json(entry["decision"])
                assert not concentrated(spread)  # every cluster's TEBs on two devices or more
                assert entry["objective"] >= evaluate(state, decision).objective * (1 - 1e-9)
    assert seen == {"spread", "fewer_microbatches", "more_microbatches", "uniform"}


def test_the_micro_batch_counterfactuals_move_m_to_the_neighbouring_choices_of_a_fixed_batch() -> None:
    config = tiny_config(
        executor="analytic",
        training={"microbatch_size": None, "batch_size": 12},
        scheduler={"policy": "uniform", "num_microbatches": 3, "max_microbatches": 12},
    )
    state = api.round_state(config, 0)
    decision = get_policy("uniform").decide(state)
    explanation = explain(state, decision, evaluate(state, decision), optimised=False)
    by_name = {e["name"]: e for e in explanation["counterfactuals"]}
    assert "spread" not in by_name  # a rule's decision is its rule
    fewer = Decision.from_json(by_name["fewer_microbatches"]["decision"]).num_microbatches().tolist()
    more = Decision.from_json(by_name["more_microbatches"]["decision"]).num_microbatches().tolist()
    assert (fewer, more) == ([2, 2], [4, 4])  # 3's neighbours among the divisors of 12
    _check_entries(state, decision, explanation)


def test_a_concentrated_decision_says_what_spreading_would_cost() -> None:
    state = random_instance(3)
    for seed in range(60):
        state = random_instance(seed)
        try:
            decision = get_policy("dssda").decide(state)
        except ValueError:
            continue
        spreadable = state.profile.num_blocks > 1 and np.all(state.available.sum(axis=1) > 1)
        if concentrated(decision) and spreadable:
            break
    else:
        pytest.fail("no random round where DSSDA concentrates")
    explanation = explain(state, decision, evaluate(state, decision))
    sentence = explanation["sentence"]
    assert "the best placement over two or more devices per cluster" in sentence
    spread = explanation["counterfactuals"][0]
    if spread["decision"] is not None:
        worst = max(("compute", "links", "energy", "convergence"), key=lambda t: spread["delta"][t])
        named = {"compute": "compute", "links": "link time", "energy": "energy", "convergence": "convergence"}
        assert named[worst] in sentence


def test_the_runner_stores_each_round_s_explanation() -> None:
    config = tiny_config(executor="analytic", training={"rounds": 2}, scheduler={"policy": "dssda"})
    sink = MemorySink()
    Runner(config, sink).run()
    for result in sink.results:
        explanation = result.round.explanation
        assert explanation["sentence"] and explanation["counterfactuals"]
        assert dataclasses.asdict(result.round)["explanation"] == explanation  # JSON-ready
