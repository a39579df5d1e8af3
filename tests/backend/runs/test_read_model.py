"""What the runs list and a run's page read: a listed run's owner, shape and latest figures; a run's
detail with its owner's name and the id of its latest live event."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update

from backend.db.models import RoundMetric, Run, RunEvent
from backend.runs.repository import _PAGE_QUERIES
from backend.runs.schemas import RunListItem
from backend.runtime.repository import copy_latest_figures
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api


def _launch(api: Api, config: dict[str, Any]) -> int:
    response = api.client.post("/api/runs", json={"config": config}, headers=api.as_("operator"))
    assert response.status_code == 201, response.text
    run_id: int = response.json()["id"]
    return run_id


def _store_rounds(api: Api, run_id: int, evals: dict[int, dict[str, float]], rounds: int) -> None:
    """``rounds`` stored rounds (latency 1 + round/10); rounds in ``evals`` evaluated with those figures."""
    with api.session_factory() as session:
        for index in range(rounds):
            figures = evals.get(index, {})
            eval_loss = figures.get("eval_loss")
            metrics = {k: v for k, v in figures.items() if k != "eval_loss"}
            record = {"round": index, "eval_loss": eval_loss, "eval_metrics": metrics}
            session.add(
                RoundMetric(
                    run_id=run_id,
                    round=index,
                    record=record,
                    latency_s=1 + index / 10,
                    objective=1.0,
                    train_loss=0.5,
                    eval_loss=eval_loss,
                )
            )
        session.execute(update(Run).where(Run.id == run_id).values(rounds_done=rounds, status="running"))
        for index in range(rounds):  # as storing a round does
            copy_latest_figures(session, run_id, index)
        session.commit()


def test_a_listing_selects_the_fields_of_a_listed_run_in_order() -> None:
    """The listing writes its rows as they are selected (not through RunListItem): same names, same order."""
    for _, rows in _PAGE_QUERIES.values():
        assert [column.key for column in rows.selected_columns] == list(RunListItem.model_fields)


def test_a_listed_run_has_its_owner_shape_and_latest_figures(api: Api) -> None:
    llm = _launch(api, tiny_config(name="lm", scheduler={"V": 7.5}, network={"num_clusters": 3}))
    classifier = _launch(api, tiny_config(name="classifier"))
    fresh = _launch(api, tiny_config(name="fresh", network={"devices_per_cluster": 2}))
    _store_rounds(
        api,
        llm,
        {
            1: {"eval_loss": 3.0, "eval_perplexity": 20.1, "eval_accuracy": 0.2},
            3: {"eval_loss": 2.0, "eval_perplexity": 7.4, "eval_accuracy": 0.4},
        },
        rounds=5,
    )
    _store_rounds(api, classifier, {2: {"eval_loss": 0.6, "eval_accuracy": 0.7}}, rounds=3)

    page = api.client.get("/api/runs", headers=api.as_("viewer")).json()
    rows = {item["id"]: item for item in page["items"]}
    assert [item["id"] for item in page["items"]] == [fresh, classifier, llm]
    assert all(item["owner_name"] == "operator" for item in page["items"])
    shape = {"V": 7.5, "num_clusters": 3, "devices_per_cluster": 3}
    assert {key: rows[llm][key] for key in shape} == shape
    assert (rows[fresh]["V"], rows[fresh]["num_clusters"], rows[fresh]["devices_per_cluster"]) == (1.0, 2, 2)
    assert {key: value for key, value in rows[llm].items() if key.startswith("latest_")} == {
        "latest_round": 4,
        "latest_latency_s": 1.4,
        "latest_eval_round": 3,  # not round 4: it was not evaluated
        "latest_eval_loss": 2.0,
        "latest_eval_perplexity": 7.4,
        "latest_eval_accuracy": 0.4,
    }
    assert rows[classifier]["latest_eval_perplexity"] is None  # not a causal LM: no perplexity
    assert (rows[classifier]["latest_eval_accuracy"], rows[classifier]["latest_latency_s"]) == (0.7, 1.2)
    assert {key: value for key, value in rows[fresh].items() if key.startswith("latest_")} == {
        "latest_round": None,
        "latest_latency_s": None,
        "latest_eval_round": None,
        "latest_eval_loss": None,
        "latest_eval_perplexity": None,
        "latest_eval_accuracy": None,
    }
    # filters and paging pick the runs first; every row keeps its own figures
    second = api.client.get("/api/runs", params={"limit": 1, "offset": 2}, headers=api.as_("viewer")).json()
    assert second["items"] == [rows[llm]] and second["total"] == 3
    searched = api.client.get("/api/runs", params={"search": "class"}, headers=api.as_("viewer")).json()
    assert searched["items"] == [rows[classifier]]


def _last_event_id(api: Api, run_id: int) -> str:
    with api.session_factory() as session:
        latest = session.scalar(select(func.max(RunEvent.position)).where(RunEvent.run_id == run_id))
    return str(latest or 0)


def test_a_runs_page_opens_at_the_head_of_its_live_stream(api: Api) -> None:
    run_id, other = _launch(api, tiny_config()), _launch(api, tiny_config())
    viewer = api.as_("viewer")
    view = api.client.get(f"/api/runs/{run_id}", headers=viewer).json()
    assert (view["owner_name"], view["config"]["seed"]) == ("operator", 3)
    assert view["last_event_id"] == _last_event_id(api, run_id)
    with api.session_factory() as session:
        session.add(RunEvent(run_id=run_id, kind="round", data={"round": {"round": 0}}))
        session.commit()
    head = _last_event_id(api, run_id)
    assert int(head) > int(view["last_event_id"])
    with api.session_factory() as session:  # another run's events are not this run's head
        session.add(RunEvent(run_id=other, kind="round", data={"round": {"round": 0}}))
        session.commit()
    assert api.client.get(f"/api/runs/{run_id}", headers=viewer).json()["last_event_id"] == head
    assert api.client.get("/api/runs/999", headers=viewer).status_code == 404
