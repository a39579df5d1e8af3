"""The public scripting API and bringing your own policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from collapipe_core import api
from collapipe_core.decision import Decision
from tests.core.builders import tiny_config

USER_POLICY = '''
import numpy as np
from collapipe_core.decision import Decision


class AllOnFirst:
    """Every TEB on each cluster's first device, full bandwidth, half power, M = 1."""

    name = "all-on-first"

    def decide(self, state):
        n, k = state.scenario.shape
        delta = np.zeros((n, k), dtype=int)
        delta[:, 0] = state.profile.num_blocks
        beta = (delta > 0).astype(float)
        return Decision.from_arrays(delta, beta, 0.5 * state.scenario.max_power_w * beta, 1)
'''


def test_round_state_decide_evaluate_round_trip() -> None:
    config = tiny_config()
    state = api.round_state(config, 2, queues=np.full((2, 3), 0.5))
    decision = api.decide("uniform", state)
    report = api.evaluate(state, decision)
    assert report["feasible"] and report["violations"] == []
    assert set(report["energy_j"]) == {f"c{n}-d{k}" for n in range(2) for k in range(3)}
    terms = report["objective_terms"]
    assert report["objective"] == pytest.approx(
        terms["latency"] + terms["convergence"] + terms["queue_energy"]
    )
    again = Decision.from_json(json.loads(json.dumps(decision.to_json())))
    assert again == decision
    assert api.evaluate(state, again) == report


def test_schedule_rounds_carries_each_round_s_placement_into_the_next() -> None:
    config = tiny_config(executor="analytic", scheduler={"policy": "random"})
    rows = api.schedule_rounds(config, 3)
    assert rows[0]["blocks_moved"] == 0 and rows[0]["moves_latency_s"] == 0.0
    env = api.environment(config)
    for t in (1, 2):
        # round t as the API rebuilds it from the placement round t − 1 left
        before = api.round_state(env, t - 1)
        previous = api.placement(before, Decision.from_json(rows[t - 1]["decision"]))
        state = api.round_state(
            env, t, queues=np.array(list(rows[t]["queues"].values())).reshape(2, 3), previous=previous
        )
        report = api.evaluate(state, Decision.from_json(rows[t]["decision"]))
        assert report["blocks_moved"] == rows[t]["blocks_moved"]
        assert (
            report["latency_s"] == rows[t]["latency_s"]
            and report["redistribution_s"] == rows[t]["redistribution_s"]
        )
    assert sum(r["blocks_moved"] for r in rows) > 0
    # a first round given a placement is charged against it
    first = api.schedule_rounds(
        config, 1, previous=api.placement(api.round_state(env, 1), Decision.from_json(rows[1]["decision"]))
    )
    assert first[0]["decision"] == rows[0]["decision"] and first[0]["blocks_moved"] > 0


def test_user_policy_by_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_policies.py").write_text(USER_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tiny_config(scheduler={"policy": "my_policies:AllOnFirst"})
    state = api.round_state(config, 0)
    decision = api.decide(config.scheduler.policy, state)
    assert decision.num_blocks()[:, 0].tolist() == [4, 4]
    rows = api.schedule_rounds(config, 2)
    assert rows[0]["policy"] == "all-on-first"
    sys.modules.pop("my_policies", None)


def test_malformed_decision_json_names_the_problem() -> None:
    with pytest.raises(ValueError, match="missing or wrong field"):
        Decision.from_json({"clusters": [{"num_microbatches": 2}]})
    with pytest.raises(ValueError, match="mode must be"):
        Decision.from_json({"clusters": [], "mode": "teleport"})


def test_load_config_is_the_validated_loader(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config().model_dump(mode="json", by_alias=True)))
    assert api.load_config(path).name == "tiny"
