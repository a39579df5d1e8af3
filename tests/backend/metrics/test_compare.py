"""/api/compare with a target eval loss: each run's modeled time and rounds to reach it, and the time's
ratio to the baseline's. Two trained runs with the same seed and data (the same eval losses) whose
policies cut the model differently (different round latencies); the expected figures are recomputed
here from their stored rounds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backend.builders import tiny_config
from tests.backend.conftest import Api

ROUNDS = 6


def _finished_run(api: Api, **sections: Any) -> int:
    config = tiny_config(executor="simulated", training={"rounds": ROUNDS}, **sections)
    created = api.client.post("/api/runs", json={"config": config}, headers=api.as_("operator"))
    run_id: int = created.json()["id"]
    assert api.run_to_end(run_id) == "succeeded"
    return run_id


def _compare(api: Api, run_ids: list[int], **params: Any) -> Any:
    params = {"run_ids": ",".join(map(str, run_ids)), "baseline": run_ids[0], **params}
    return api.client.get("/api/compare", params=params, headers=api.as_("viewer"))


def _losses(api: Api, run_id: int) -> list[float]:
    params = {"fields": "eval_loss", "method": "none"}
    series = api.client.get(f"/api/runs/{run_id}/rounds", params=params, headers=api.as_("viewer")).json()
    losses: list[float] = series["series"]["eval_loss"]["value"]
    return losses


def _expected(api: Api, run_id: int, target: float) -> tuple[float, int] | None:
    """The first round whose eval loss is at most ``target``: Σ latency_s up to it, and its count."""
    params = {"fields": ["latency_s", "eval_loss"], "method": "none"}
    series = api.client.get(f"/api/runs/{run_id}/rounds", params=params, headers=api.as_("viewer")).json()
    latency, loss = series["series"]["latency_s"], series["series"]["eval_loss"]
    assert latency["round"] == loss["round"] == list(range(ROUNDS))  # every round evaluated
    for i, value in enumerate(loss["value"]):
        if value <= target:
            assert sum(latency["value"][: i + 1]) == pytest.approx(loss["elapsed_s"][i])  # one clock
            return sum(latency["value"][: i + 1]), i + 1
    return None


def test_time_to_a_target_eval_loss_and_its_ratio_to_the_baseline(api: Api) -> None:
    uniform = _finished_run(api)
    fixed = _finished_run(api, scheduler={"policy": "fixed", "segments": [1, 1, 2]})
    # each run's median eval loss, the larger: both reach it, not necessarily at their first round
    target = max(sorted(_losses(api, run_id))[ROUNDS // 2] for run_id in (uniform, fixed))

    body = _compare(api, [uniform, fixed], target_eval_loss=target).json()
    assert body["target_eval_loss"] == target
    base, other = body["runs"]
    for row in (base, other):
        expected = _expected(api, row["run_id"], target)
        assert expected is not None
        assert row["time_to_target_s"] == pytest.approx(expected[0])
        assert row["rounds_to_target"] == expected[1]
    assert base["ratios"]["time_to_target_s"] == 1.0
    assert other["ratios"]["time_to_target_s"] == pytest.approx(
        other["time_to_target_s"] / base["time_to_target_s"]
    )
    assert other["time_to_target_s"] != pytest.approx(base["time_to_target_s"])  # other cuts, other clocks

    # a target no round reached, and no target: no time, no ratio
    for params in ({"target_eval_loss": 0.0}, {}):
        body = _compare(api, [uniform, fixed], **params).json()
        for row in body["runs"]:
            assert (row["time_to_target_s"], row["rounds_to_target"]) == (None, None), params
            assert row["ratios"]["time_to_target_s"] is None, params


@pytest.mark.deployments("embedded")  # validation happens before any run is read
def test_a_target_that_is_not_a_finite_loss_is_refused(api: Api) -> None:
    for value in ("nan", "inf", "-inf", "1e999", "-1", "abc", ""):
        response = _compare(api, [1], target_eval_loss=value)
        assert response.status_code == 422, (value, response.text)
        error = response.json()["error"]
        assert error["details"][0]["field"] == "query.target_eval_loss", (value, error)
        assert "target_eval_loss" in error["message"], (value, error)
