"""The run lifecycle through the API (no executor: the dispatcher only records what it was given)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from backend.db.models import Run
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api


def _launch(api: Api, **body: Any) -> dict[str, Any]:
    response = api.client.post(
        "/api/runs", json=body or {"config": tiny_config()}, headers=api.as_("operator")
    )
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def _set(api: Api, run_id: int, **values: Any) -> None:
    with api.session_factory() as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))
        session.commit()


def test_launch_queues_and_dispatches_after_commit(api: Api) -> None:
    run = _launch(api)
    assert (run["status"], run["total_rounds"], run["policy"], run["executor"]) == (
        "queued",
        5,
        "uniform",
        "analytic",
    )
    assert api.dispatcher.enqueued == [run["id"]]
    assert api.client.get(f"/api/runs/{run['id']}", headers=api.as_("viewer")).json()["config"]["seed"] == 3


def test_launch_from_an_experiment(api: Api) -> None:
    experiment = api.client.post(
        "/api/experiments", json={"name": "saved", "config": tiny_config()}, headers=api.as_("operator")
    ).json()
    run = _launch(api, experiment_id=experiment["id"])
    assert run["experiment_id"] == experiment["id"] and run["name"] == "saved"


def test_a_bad_config_is_422_with_field_paths_and_nothing_is_stored(api: Api) -> None:
    config = tiny_config(network={"num_clusters": 0}, scheduler={"policy": "nope"})
    response = api.client.post("/api/runs", json={"config": config}, headers=api.as_("operator"))
    assert response.status_code == 422
    details = response.json()["error"]["details"]
    assert [d["field"] for d in details] == ["config.network.num_clusters"]
    assert details[0]["value"] == 0 and "greater than or equal to 1" in details[0]["message"]
    assert api.client.get("/api/runs", headers=api.as_("viewer")).json()["total"] == 0
    assert api.dispatcher.enqueued == []
    both = api.client.post(
        "/api/runs", json={"config": tiny_config(), "experiment_id": 1}, headers=api.as_("operator")
    )
    assert both.status_code == 422 and both.json()["error"]["code"] == "invalid_request"


def test_list_filters_by_status_owner_and_name(api: Api) -> None:
    first, second = _launch(api), _launch(api, config=tiny_config(name="other"))
    _set(api, first["id"], status="succeeded")
    viewer = api.as_("viewer")
    assert [
        r["id"]
        for r in api.client.get("/api/runs", params={"status": "queued"}, headers=viewer).json()["items"]
    ] == [second["id"]]
    assert api.client.get("/api/runs", params={"search": "OTH"}, headers=viewer).json()["total"] == 1
    assert api.client.get("/api/runs", params={"owner": "operator"}, headers=viewer).json()["total"] == 2
    assert api.client.get("/api/runs", params={"owner": "admin"}, headers=viewer).json()["total"] == 0
    bad = api.client.get("/api/runs", params={"status": "sleeping"}, headers=viewer)
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == "query.status.0"


def test_list_search_matches_wildcards_literally_and_filters_combine_with_paging(api: Api) -> None:
    names = ["100% done", "a_b", "x/y", "plain", "ab"]
    ids = {name: _launch(api, config=tiny_config(name=name))["id"] for name in names}
    viewer = api.as_("viewer")

    def listed(**params: Any) -> tuple[list[str], int]:
        page = api.client.get("/api/runs", params=params, headers=viewer).json()
        return [item["name"] for item in page["items"]], page["total"]

    assert listed(search="%") == (["100% done"], 1)
    assert listed(search="_") == (["a_b"], 1)
    assert listed(search="/") == (["x/y"], 1)
    assert listed(search="A") == (["ab", "plain", "a_b"], 3)  # newest first, any case
    _set(api, ids["ab"], status="succeeded")
    both = {"status": "queued", "owner": "operator", "search": "a"}
    assert listed(**both) == (["plain", "a_b"], 2)
    assert listed(**both, limit=1, offset=1) == (["a_b"], 2)
    assert listed(owner="admin", search="a") == ([], 0)
    assert listed(status=["queued", "succeeded"], limit=2) == (["ab", "plain"], 5)


def test_cancel_a_queued_run_at_once_and_a_running_one_cooperatively(api: Api) -> None:
    queued = _launch(api)
    cancelled = api.client.post(f"/api/runs/{queued['id']}/cancel", headers=api.as_("operator")).json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
    running = _launch(api)
    _set(api, running["id"], status="running")
    asked = api.client.post(f"/api/runs/{running['id']}/cancel", headers=api.as_("operator")).json()
    assert (asked["status"], asked["cancel_requested"]) == ("running", True)
    _set(api, running["id"], status="succeeded")
    again = api.client.post(f"/api/runs/{running['id']}/cancel", headers=api.as_("operator"))
    assert again.status_code == 409 and "succeeded" in again.json()["error"]["message"]


def test_resume_requeues_failed_or_cancelled_runs_only(api: Api) -> None:
    run = _launch(api)
    assert api.client.post(f"/api/runs/{run['id']}/resume", headers=api.as_("operator")).status_code == 409
    _set(api, run["id"], status="failed", error="boom")
    resumed = api.client.post(f"/api/runs/{run['id']}/resume", headers=api.as_("operator")).json()
    assert (resumed["status"], resumed["error"]) == ("queued", None)
    assert api.dispatcher.enqueued == [run["id"], run["id"]]


def test_fork_validates_the_round_and_builds_the_replay_plan(api: Api) -> None:
    parent = _launch(api)
    op = api.as_("operator")
    early = api.client.post(f"/api/runs/{parent['id']}/fork", json={"round": 2}, headers=op)
    assert early.status_code == 422 and early.json()["error"]["details"][0]["field"] == "round"
    _set(api, parent["id"], status="succeeded", rounds_done=5)
    fork = api.client.post(f"/api/runs/{parent['id']}/fork", json={"round": 2, "V": 7.5}, headers=op)
    assert fork.status_code == 201, fork.text
    body = fork.json()
    assert (body["parent_run_id"], body["fork_round"], body["config"]["scheduler"]["V"]) == (
        parent["id"],
        2,
        7.5,
    )
    assert body["replay_configs"] == [{"until_round": 2, "config": parent_config(api, parent["id"])}]
    bad = api.client.post(f"/api/runs/{parent['id']}/fork", json={"round": 1, "policy": "fixed"}, headers=op)
    assert (
        bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == "config.scheduler.segments"
    )
    grandchild = api.client.post(
        f"/api/runs/{body['id']}/fork", json={"round": 1, "policy": "uniform"}, headers=op
    )
    assert grandchild.status_code == 422  # the fork has no rounds yet
    _set(api, body["id"], rounds_done=4)
    grandchild = api.client.post(f"/api/runs/{body['id']}/fork", json={"round": 1}, headers=op).json()
    assert [e["until_round"] for e in grandchild["replay_configs"]] == [1, 1]


def parent_config(api: Api, run_id: int) -> dict[str, Any]:
    config: dict[str, Any] = api.client.get(f"/api/runs/{run_id}", headers=api.as_("viewer")).json()["config"]
    return config


def test_delete_is_refused_for_active_runs(api: Api) -> None:
    run = _launch(api)
    assert api.client.delete(f"/api/runs/{run['id']}", headers=api.as_("admin")).status_code == 409
    _set(api, run["id"], status="failed")
    assert api.client.delete(f"/api/runs/{run['id']}", headers=api.as_("admin")).status_code == 204
    assert api.client.get(f"/api/runs/{run['id']}", headers=api.as_("viewer")).status_code == 404


def test_a_finished_run_continues_as_a_fork_at_its_last_round_with_more_rounds(api: Api) -> None:
    parent = _launch(api)  # 5 rounds
    op = api.as_("operator")
    _set(api, parent["id"], status="succeeded", rounds_done=5)
    fork = api.client.post(f"/api/runs/{parent['id']}/fork", json={"round": 5, "rounds": 8}, headers=op)
    assert fork.status_code == 201, fork.text
    body = fork.json()
    assert (body["fork_round"], body["total_rounds"], body["config"]["training"]["rounds"]) == (5, 8, 8)
    assert body["replay_configs"] == [{"until_round": 5, "config": parent_config(api, parent["id"])}]
    assert "8 rounds" in body["name"]
    # the last round with the parent's rounds (nothing left to run), or rounds that end before k: refused
    for asked in ({"round": 5}, {"round": 5, "rounds": 5}, {"round": 4, "rounds": 3}):
        refused = api.client.post(f"/api/runs/{parent['id']}/fork", json=asked, headers=op)
        assert refused.status_code == 422, asked
        assert refused.json()["error"]["details"][0]["field"] == "rounds"
        assert "more than" in refused.json()["error"]["message"]
    beyond = api.client.post(f"/api/runs/{parent['id']}/fork", json={"round": 6, "rounds": 9}, headers=op)
    assert beyond.status_code == 422 and beyond.json()["error"]["details"][0]["field"] == "round"
    too_many = api.client.post(
        f"/api/runs/{parent['id']}/fork", json={"round": 5, "rounds": 2_000_000}, headers=op
    )
    assert too_many.status_code == 422 and too_many.json()["error"]["details"][0]["field"] == "body.rounds"
    assert api.client.get("/api/runs", headers=api.as_("viewer")).json()["total"] == 2  # parent + one fork
