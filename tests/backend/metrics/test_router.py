"""Metric reads of a finished run: series, downsampling, decisions, timeline, export, compare.

The runs really execute on the deployment's executor (a spawned process, or the Celery worker).
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from backend.db.models import RoundMetric
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api


def _finished_run(api: Api, **sections: Any) -> int:
    created = api.client.post(
        "/api/runs", json={"config": tiny_config(**sections)}, headers=api.as_("operator")
    )
    run_id: int = created.json()["id"]
    assert api.run_to_end(run_id) == "succeeded"
    return run_id


@pytest.fixture
def run_id(api: Api) -> int:
    return _finished_run(api, training={"rounds": 12})


def test_round_series_columns_and_record_fields(api: Api, run_id: int) -> None:
    params = {"fields": ["latency_s", "bubble_fraction_mean", "train_loss"]}
    body = api.client.get(f"/api/runs/{run_id}/rounds", params=params, headers=api.as_("viewer")).json()
    assert body["points_stored"] == 12 and body["units"]["latency_s"] == "s"
    assert body["series"]["latency_s"]["round"] == list(range(12))
    assert all(v > 0 for v in body["series"]["latency_s"]["value"])
    assert len(body["series"]["bubble_fraction_mean"]["value"]) == 12
    assert body["series"]["train_loss"] == {"round": [], "value": []}  # analytic: nothing trained


def test_round_series_range_and_downsampling(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    ranged = api.client.get(f"/api/runs/{run_id}/rounds", params={"from": 3, "to": 5}, headers=viewer).json()
    assert ranged["series"]["objective"]["round"] == [3, 4, 5]
    thin = api.client.get(f"/api/runs/{run_id}/rounds", params={"max_points": 4}, headers=viewer).json()
    rounds = thin["series"]["latency_s"]["round"]
    assert len(rounds) == 4 and rounds[0] == 0 and rounds[-1] == 11
    unknown = api.client.get(f"/api/runs/{run_id}/rounds", params={"fields": "latency"}, headers=viewer)
    assert unknown.status_code == 422 and "latency_s" in unknown.json()["error"]["message"]


def test_device_series_by_device_and_cluster(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    body = api.client.get(f"/api/runs/{run_id}/devices", params={"metric": "energy_j"}, headers=viewer).json()
    assert body["unit"] == "J" and sorted(body["series"]) == [
        f"c{n}-d{k}" for n in range(2) for k in range(3)
    ]
    one = api.client.get(
        f"/api/runs/{run_id}/devices",
        params={"metric": "num_blocks", "cluster": 1, "device_id": "c1-d0"},
        headers=viewer,
    ).json()
    assert list(one["series"]) == ["c1-d0"] and one["series"]["c1-d0"]["value"] == [2.0] * 12
    assert (
        api.client.get(f"/api/runs/{run_id}/devices", params={"metric": "x"}, headers=viewer).status_code
        == 422
    )


def test_decision_log_pages(api: Api, run_id: int) -> None:
    body = api.client.get(
        f"/api/runs/{run_id}/decisions", params={"limit": 5, "offset": 5}, headers=api.as_("viewer")
    ).json()
    assert body["total"] == 12 and [d["round"] for d in body["items"]] == [5, 6, 7, 8, 9]
    first = body["items"][0]
    assert first["policy"] == "uniform" and len(first["decision"]["clusters"]) == 2


def test_timeline_rebuilds_a_rounds_gantt(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    body = api.client.get(
        f"/api/runs/{run_id}/timeline", params={"round": 4, "cluster": 1}, headers=viewer
    ).json()
    assert body["schedule"] == "gpipe" and body["num_microbatches"] == 2 and body["makespan_s"] > 0
    participants = {e["participant"] for e in body["events"]}
    assert {"cu", "edge", "c1-d0"} <= participants
    assert max(e["end_s"] for e in body["events"]) == pytest.approx(body["makespan_s"])
    makespan = api.client.get(
        f"/api/runs/{run_id}/rounds", params={"fields": "makespan_s_max"}, headers=viewer
    ).json()
    assert body["makespan_s"] <= makespan["series"]["makespan_s_max"]["value"][4] + 1e-12
    missing = api.client.get(f"/api/runs/{run_id}/timeline", params={"round": 99}, headers=viewer)
    assert missing.status_code == 404
    bad = api.client.get(f"/api/runs/{run_id}/timeline", params={"round": 1, "cluster": 7}, headers=viewer)
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == "cluster"


def test_export_csv_and_parquet(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    response = api.client.get(f"/api/runs/{run_id}/export", params={"format": "csv"}, headers=viewer)
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [int(r["round"]) for r in rows] == list(range(12)) and float(rows[0]["latency_s"]) > 0
    parquet = api.client.get(
        f"/api/runs/{run_id}/export", params={"format": "parquet", "table": "devices"}, headers=viewer
    )
    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.num_rows == 12 * 6 and "energy_j" in table.column_names


def test_compare_against_a_baseline(api: Api, run_id: int) -> None:
    other = _finished_run(api, training={"rounds": 12}, scheduler={"policy": "fixed", "segments": [1, 1, 2]})
    body = api.client.get(
        "/api/compare", params={"run_ids": f"{run_id},{other}", "baseline": run_id}, headers=api.as_("viewer")
    ).json()
    assert body["baseline_run_id"] == run_id and [r["run_id"] for r in body["runs"]] == [run_id, other]
    base, fixed = body["runs"]
    assert base["ratios"]["mean_latency_s"] == 1.0 and 0 < base["efficiency"] <= 1
    assert fixed["ratios"]["mean_latency_s"] == pytest.approx(
        fixed["mean_latency_s"] / base["mean_latency_s"]
    )
    missing = api.client.get("/api/compare", params={"run_ids": [run_id, 999]}, headers=api.as_("viewer"))
    assert missing.status_code == 404


def test_round_series_sees_rounds_stored_after_a_cached_read(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    first = api.client.get(f"/api/runs/{run_id}/rounds", headers=viewer).json()
    assert api.client.get(f"/api/runs/{run_id}/rounds", headers=viewer).json() == first  # from the cache
    with api.session_factory() as session:  # a running run's next round, as the sink stores it
        last = session.scalars(
            select(RoundMetric).where(RoundMetric.run_id == run_id).order_by(RoundMetric.round.desc())
        ).first()
        assert last is not None
        session.add(
            RoundMetric(
                run_id=run_id,
                round=12,
                record=dict(last.record),
                latency_s=last.latency_s * 2,
                objective=last.objective,
                train_loss=None,
                eval_loss=None,
            )
        )
        session.commit()
    after = api.client.get(f"/api/runs/{run_id}/rounds", headers=viewer).json()
    assert after["points_stored"] == 13
    assert after["series"]["latency_s"]["round"] == list(range(13))
    assert after["series"]["latency_s"]["value"][-1] == first["series"]["latency_s"]["value"][-1] * 2
