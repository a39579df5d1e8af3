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

from backend.db.models import RoundMetric, RunEvent
from backend.metrics import export as exporting
from backend.metrics import repository as metrics_repository
from backend.metrics import service
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
    # analytic: nothing trained
    assert body["series"]["train_loss"] == {"round": [], "value": [], "elapsed_s": []}


def test_a_rounds_device_records_come_a_page_at_a_time(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    first = api.client.get(f"/api/runs/{run_id}/rounds/7/devices", params={"limit": 4}, headers=viewer).json()
    rest = api.client.get(
        f"/api/runs/{run_id}/rounds/7/devices", params={"limit": 4, "offset": 4}, headers=viewer
    ).json()
    assert (first["total"], first["limit"], first["offset"], rest["offset"]) == (6, 4, 0, 4)
    devices = first["items"] + rest["items"]
    assert [d["device_id"] for d in devices] == ["c0-d0", "c0-d1", "c0-d2", "c1-d0", "c1-d1", "c1-d2"]
    assert all(d["round"] == 7 and d["measured"] == {} for d in devices)
    # the same records a round event carries
    with api.session_factory() as session:
        event = session.scalars(
            select(RunEvent)
            .where(RunEvent.run_id == run_id, RunEvent.kind == "round")
            .order_by(RunEvent.position)
        ).all()[7]
    assert event.data["devices"] == devices
    missing = api.client.get(f"/api/runs/{run_id}/rounds/12/devices", headers=viewer)
    assert missing.status_code == 404 and "has no stored round 12" in missing.json()["error"]["message"]
    assert api.client.get("/api/runs/999/rounds/0/devices", headers=viewer).status_code == 404
    too_many = api.client.get(f"/api/runs/{run_id}/rounds/0/devices", params={"limit": 1001}, headers=viewer)
    assert too_many.status_code == 422 and "limit" in too_many.json()["error"]["message"]


def test_device_series_page_through_the_devices_and_refuse_reading_too_much(
    api: Api, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    viewer = api.as_("viewer")
    url = f"/api/runs/{run_id}/devices"
    asks = [{"metric": "energy_j", "limit": 4, "offset": offset} for offset in (0, 4, 8)]
    pages = [api.client.get(url, params=ask, headers=viewer).json() for ask in asks]
    assert [sorted(p["metrics"].get("energy_j", {}).get("series", {})) for p in pages] == [
        ["c0-d0", "c0-d1", "c0-d2", "c1-d0"],
        ["c1-d1", "c1-d2"],
        [],
    ]
    assert [p["devices_total"] for p in pages] == [6, 6, 6]
    # a request may read only so many stored rows (devices x rounds): 12 rounds x 6 devices here
    monkeypatch.setattr(service, "MAX_DEVICE_ROWS", 20)
    refused = api.client.get(url, params={"metric": "energy_j"}, headers=viewer)
    assert refused.status_code == 422
    assert "72 stored device rows" in refused.json()["error"]["message"]
    assert "limit and offset" in refused.json()["error"]["message"]
    one = api.client.get(url, params={"metric": "energy_j", "limit": 1}, headers=viewer)
    assert one.status_code == 200 and list(one.json()["metrics"]["energy_j"]["series"]) == ["c0-d0"]
    ranged = api.client.get(url, params={"metric": "energy_j", "from": 10}, headers=viewer)
    assert ranged.status_code == 200  # 2 rounds x 6 devices


def test_round_series_range_and_downsampling(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    ranged = api.client.get(f"/api/runs/{run_id}/rounds", params={"from": 3, "to": 5}, headers=viewer).json()
    assert ranged["series"]["objective"]["round"] == [3, 4, 5]
    thin = api.client.get(f"/api/runs/{run_id}/rounds", params={"max_points": 4}, headers=viewer).json()
    rounds = thin["series"]["latency_s"]["round"]
    assert len(rounds) == 4 and rounds[0] == 0 and rounds[-1] == 11
    unknown = api.client.get(f"/api/runs/{run_id}/rounds", params={"fields": "latency"}, headers=viewer)
    assert unknown.status_code == 422 and "latency_s" in unknown.json()["error"]["message"]


def test_device_series_of_several_metrics_in_one_request(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    params = {"metric": ["energy_j", "energy_budget_j:2", "num_blocks:5:mean"], "max_points": 4}
    body = api.client.get(f"/api/runs/{run_id}/devices", params=params, headers=viewer).json()
    assert list(body["metrics"]) == ["energy_j", "energy_budget_j", "num_blocks"]
    devices = [f"c{n}-d{k}" for n in range(2) for k in range(3)]
    energy, budget, blocks = (body["metrics"][m] for m in ("energy_j", "energy_budget_j", "num_blocks"))
    assert (energy["unit"], energy["method"], energy["max_points"]) == ("J", "lttb", 4)
    assert sorted(energy["series"]) == devices
    assert all(
        s["round"][0] == 0 and s["round"][-1] == 11 and len(s["round"]) == 4
        for s in energy["series"].values()
    )
    assert (budget["max_points"], [s["round"] for s in budget["series"].values()]) == (2, [[0, 11]] * 6)
    assert blocks["method"] == "mean" and len(blocks["series"]["c1-d0"]["round"]) == 5
    # the same values as the run's stored device rows
    full = api.client.get(
        f"/api/runs/{run_id}/devices", params={"metric": "energy_j", "method": "none"}, headers=viewer
    ).json()["metrics"]["energy_j"]["series"]
    assert all(len(s["value"]) == 12 for s in full.values())
    for device, series in energy["series"].items():
        assert series["value"][-1] == full[device]["value"][-1]
    one = api.client.get(
        f"/api/runs/{run_id}/devices",
        params={"metric": "num_blocks", "cluster": 1, "device_id": "c1-d0", "from": 2, "to": 4},
        headers=viewer,
    ).json()["metrics"]["num_blocks"]["series"]
    assert list(one) == ["c1-d0"] and one["c1-d0"]["round"] == [2.0, 3.0, 4.0]
    assert one["c1-d0"]["value"] == [2.0] * 3
    # one cluster's charts beside a heatmap of every device
    params = {"metric": ["energy_j", "num_blocks:5:mean"], "cluster": 1, "all_devices": "num_blocks"}
    mixed = api.client.get(f"/api/runs/{run_id}/devices", params=params, headers=viewer).json()["metrics"]
    assert sorted(mixed["energy_j"]["series"]) == ["c1-d0", "c1-d1", "c1-d2"]
    assert sorted(mixed["num_blocks"]["series"]) == devices


BAD_METRICS = [
    (["x"], "unknown metric 'x'"),
    (["record"], "unknown metric 'record'"),  # a column of the table, not a device metric
    (["energy_j", "energy_j:10"], "energy_j asked more than once"),
    (["energy_j:1"], "max_points must be a whole number from 2 to 100000"),
    (["energy_j:200:fast"], "method must be one of lttb, minmax, mean, none"),
]
HOSTILE = [
    {},  # no metric
    {"metric": ["energy_j"] * 13},  # more metrics than there are
    {"metric": "energy_j;DROP TABLE runs"},
    {"metric": "energy_j:99999999"},
    {"metric": "x" * 65},
    {"metric": "energy_j", "max_points": 1},
    {"metric": "energy_j", "device_id": ["c0-d0"] * 1001},
    {"metric": "energy_j", "all_devices": "x" * 65},
]


def test_device_series_refuses_bad_and_hostile_parameters(api: Api) -> None:
    viewer = api.as_("viewer")
    for metric, problem in BAD_METRICS:
        response = api.client.get("/api/runs/1/devices", params={"metric": metric}, headers=viewer)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert problem in error["message"] and "energy_budget_j" in error["message"]  # names the choices
        assert error["details"][-1] == {"field": "metric", "value": metric[-1], "message": problem}
    for params in HOSTILE:
        response = api.client.get("/api/runs/1/devices", params=params, headers=viewer)
        assert response.status_code == 422, (params, response.text)
    params = {"metric": "energy_j", "all_devices": "queue"}
    unasked = api.client.get("/api/runs/1/devices", params=params, headers=viewer)
    assert unasked.status_code == 422 and unasked.json()["error"]["details"] == [
        {"field": "all_devices", "value": "queue", "message": "not one of the metrics asked (metric)"}
    ]
    missing = api.client.get("/api/runs/999/devices", params={"metric": "queue"}, headers=viewer)
    assert missing.status_code == 404


def test_decision_log_pages(api: Api, run_id: int) -> None:
    body = api.client.get(
        f"/api/runs/{run_id}/decisions", params={"limit": 5, "offset": 5}, headers=api.as_("viewer")
    ).json()
    assert body["total"] == 12 and [d["round"] for d in body["items"]] == [5, 6, 7, 8, 9]
    first = body["items"][0]
    assert first["policy"] == "uniform" and len(first["decision"]["clusters"]) == 2
    # the objective's terms, as the round series has them
    terms = ["objective_latency", "objective_convergence", "objective_energy"]
    series = api.client.get(
        f"/api/runs/{run_id}/rounds", params={"fields": terms, "from": 5, "to": 5}, headers=api.as_("viewer")
    ).json()["series"]
    assert [first[t] for t in terms] == [series[t]["value"][0] for t in terms]


def test_timeline_rebuilds_a_rounds_gantt(api: Api, run_id: int) -> None:
    viewer = api.as_("viewer")
    body = api.client.get(
        f"/api/runs/{run_id}/timeline", params={"round": 4, "cluster": 1}, headers=viewer
    ).json()
    assert body["schedule"] == "gpipe" and body["num_microbatches"] == 2 and body["makespan_s"] > 0
    participants = {e["participant"] for e in body["events"]}
    assert {"cu", "edge", "c1-d0"} <= participants
    # the redistribution phase, then the first iteration from redistribution_s on
    pipeline = [e for e in body["events"] if e["phase"] == "pipeline"]
    phase = [e for e in body["events"] if e["phase"] == "redistribution"]
    assert body["redistribution_s"] > 0 and phase and all(e["microbatch"] == -1 for e in phase)
    assert max(e["end_s"] for e in phase) == pytest.approx(body["redistribution_s"])
    assert min(e["start_s"] for e in pipeline) == pytest.approx(body["redistribution_s"])
    assert max(e["end_s"] for e in pipeline) == pytest.approx(body["redistribution_s"] + body["makespan_s"])
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


def test_the_devices_export_is_read_and_written_a_batch_at_a_time(
    api: Api, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The devices table (rounds x devices rows) streams: read in batches of its own short sessions,
    each written out as it comes, with the same file as a whole."""
    viewer = api.as_("viewer")
    whole = {
        fmt: api.client.get(
            f"/api/runs/{run_id}/export", params={"format": fmt, "table": "devices"}, headers=viewer
        )
        for fmt in ("csv", "parquet")
    }
    reads: list[int] = []
    batch_of = metrics_repository.device_rows_after

    def counted(*args: Any) -> Any:
        rows = batch_of(*args)
        reads.append(len(rows))
        return rows

    monkeypatch.setattr(metrics_repository, "device_rows_after", counted)
    monkeypatch.setattr(exporting, "EXPORT_BATCH", 10)
    streamed = api.client.get(
        f"/api/runs/{run_id}/export", params={"format": "csv", "table": "devices"}, headers=viewer
    )
    assert reads == [10] * 7 + [2]  # 72 rows
    assert streamed.text == whole["csv"].text and len(list(csv.DictReader(io.StringIO(streamed.text)))) == 72
    parquet = api.client.get(
        f"/api/runs/{run_id}/export", params={"format": "parquet", "table": "devices"}, headers=viewer
    )
    batched = pq.read_table(io.BytesIO(parquet.content))
    assert batched.equals(pq.read_table(io.BytesIO(whole["parquet"].content)))
    assert pq.ParquetFile(io.BytesIO(parquet.content)).num_row_groups == 8


def test_blocks_moved_are_stored_served_exported_and_drawn(api: Api) -> None:
    run_id = _finished_run(api, training={"rounds": 4}, scheduler={"policy": "random"})
    viewer = api.as_("viewer")
    with api.session_factory() as session:
        rows = session.execute(
            select(RoundMetric.blocks_moved, RoundMetric.record)
            .where(RoundMetric.run_id == run_id)
            .order_by(RoundMetric.round)
        ).all()
    records = [record for _, record in rows]
    assert [column for column, _ in rows] == [r["blocks_moved"] for r in records]
    assert records[0]["blocks_moved"] == 0 and sum(r["blocks_moved"] for r in records) > 0
    fields = ["blocks_moved", "redistribution_s_max", "moves_latency_share"]
    series = api.client.get(
        f"/api/runs/{run_id}/rounds", params={"fields": fields, "method": "none"}, headers=viewer
    ).json()["series"]
    assert series["blocks_moved"]["value"] == [r["blocks_moved"] for r in records]
    assert series["redistribution_s_max"]["value"] == pytest.approx(
        [max(r["redistribution_s"]) for r in records]
    )
    assert series["moves_latency_share"]["value"] == pytest.approx(
        [r["moves_latency_share"] for r in records]
    )
    log = api.client.get(f"/api/runs/{run_id}/decisions", headers=viewer).json()["items"]
    assert [(d["blocks_moved"], d["moves_latency_share"]) for d in log] == [
        (r["blocks_moved"], r["moves_latency_share"]) for r in records
    ]
    export = api.client.get(f"/api/runs/{run_id}/export", params={"format": "csv"}, headers=viewer)
    exported = list(csv.DictReader(io.StringIO(export.text)))
    assert [int(r["blocks_moved"]) for r in exported] == [r["blocks_moved"] for r in records]
    # the Gantt of a round with moves: the previous holders send their blocks' optimizer state
    moved_round = next(i for i, r in enumerate(records) if r["blocks_moved"] > 0)
    uploads = []
    for cluster in range(2):
        params = {"round": moved_round, "cluster": cluster}
        body = api.client.get(f"/api/runs/{run_id}/timeline", params=params, headers=viewer).json()
        assert body["redistribution_s"] == pytest.approx(records[moved_round]["redistribution_s"][cluster])
        uploads += [
            e
            for e in body["events"]
            if e["phase"] == "redistribution"
            and e["kind"] == "send"
            and e["participant"] not in ("edge", "cu")
        ]
    assert uploads and all(e["peer"] == "cu" and e["label"].startswith("optimizer state of") for e in uploads)


NOISE_FIELDS = ["gradient_noise_scale", "gradient_variance", "gradient_sq_norm"]


def test_a_trained_run_s_gradient_noise_scale_is_stored_and_served(api: Api) -> None:
    run_id = _finished_run(api, executor="simulated", training={"rounds": 3})
    viewer = api.as_("viewer")
    params = {"fields": NOISE_FIELDS, "method": "none"}
    body = api.client.get(f"/api/runs/{run_id}/rounds", params=params, headers=viewer).json()
    with api.session_factory() as session:
        rows = session.execute(
            select(RoundMetric.gradient_noise_scale, RoundMetric.record)
            .where(RoundMetric.run_id == run_id)
            .order_by(RoundMetric.round)
        ).all()
    assert [column for column, _ in rows] == [record["gradient_noise_scale"] for _, record in rows]
    assert all(column is not None and column > 0 for column, _ in rows)  # M = 2: measured every round
    for field in NOISE_FIELDS:
        assert body["series"][field]["round"] == [0, 1, 2]
        assert body["series"][field]["value"] == pytest.approx([record[field] for _, record in rows])
    export = api.client.get(f"/api/runs/{run_id}/export", params={"format": "csv"}, headers=viewer)
    exported = list(csv.DictReader(io.StringIO(export.text)))
    assert [float(r["gradient_noise_scale"]) for r in exported] == pytest.approx([c for c, _ in rows])


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
