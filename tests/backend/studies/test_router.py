"""Studies through the API on both deployments: a grid of runs created together, executed by the
deployment's executor at most ``concurrency`` at a time, summarised per cell from the stored rows;
refused whole when one cell is bad; cancelled and resumed whole."""

from __future__ import annotations

import csv
import io
import itertools
import math
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from backend.db.models import DeviceMetric, RoundMetric, Run, RunEvent, Study
from backend.runtime import lifecycle
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.lifecycle import RunStore
from backend.studies.figures import FIXED_METRICS
from tests.backend.builders import PACED_POLICY, SLOW_POLICY, tiny_config
from tests.backend.conftest import Api
from tests.backend.deployments import ProductionStack, wait_terminal
from tests.backend.studies.execution import run_here
from tests.deployment_params import EMBEDDED

# t quantiles of the two-sided 95 % interval, from a table (1 and 2 degrees of freedom)
T_975 = {1: 12.706204736174705, 2: 4.302652729749464}


def _create(api: Api, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "study")
    body.setdefault("bases", [{"config": tiny_config(training={"rounds": 3})}])
    response = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _runs(api: Api, study_id: int) -> list[Run]:
    with api.session_factory() as session:
        return list(session.scalars(select(Run).where(Run.study_id == study_id).order_by(Run.id)))


def _run_all(api: Api, study_id: int) -> list[str]:
    """Release the study's runs to the deployment's executor; their final statuses."""
    api.dispatcher.release()
    return [wait_terminal(api.session_factory, run.id) for run in _runs(api, study_id)]


def _figures_of(api: Api, run: Run) -> dict[str, float]:
    """The figures of one run, recomputed here from its stored rows (bench/paper.py's definitions)."""
    with api.session_factory() as session:
        rounds = list(
            session.scalars(
                select(RoundMetric).where(RoundMetric.run_id == run.id).order_by(RoundMetric.round)
            )
        )
        devices = list(session.scalars(select(DeviceMetric).where(DeviceMetric.run_id == run.id)))
    training = run.config["training"]
    latency = [r.latency_s for r in rounds]
    samples = training["microbatch_size"] * training["local_iterations"]
    samples *= sum(sum(r.record["num_microbatches"]) for r in rounds)
    by_round: dict[int, list[DeviceMetric]] = defaultdict(list)
    by_device: dict[str, list[float]] = defaultdict(list)
    for d in devices:
        by_round[d.round].append(d)
        by_device[d.device_id].append(d.energy_j / d.energy_budget_j)
    held = [d.memory_bytes for d in devices if d.num_blocks > 0]
    return {
        "mean_latency_s": statistics.fmean(latency),
        "latency_per_sample_s": sum(latency) / samples,
        "efficiency": statistics.fmean(
            sum(d.compute_s for d in by_round[r.round]) / (len(by_round[r.round]) * r.latency_s)
            for r in rounds
        ),
        "peak_memory_bytes": max(held),
        "mean_memory_bytes": statistics.fmean(held),
        "energy_over_budget_max": max(statistics.fmean(v) for v in by_device.values()),
        "mean_backlog": statistics.fmean(d.queue for d in devices),
        "memory_over_capacity_max": max(
            d.memory_bytes / d.memory_capacity_bytes for d in devices if d.num_blocks > 0
        ),
        "mean_devices_holding_blocks": statistics.fmean(
            sum(d.num_blocks > 0 for d in by_round[r.round]) / len(r.record["num_microbatches"])
            for r in rounds
        ),
        "mean_microbatches": statistics.fmean(statistics.fmean(r.record["num_microbatches"]) for r in rounds),
    }


def _check_cell(cell: dict[str, Any], expected: list[dict[str, float]]) -> None:
    for name, values in ((n, [e[n] for e in expected]) for n in expected[0]):
        summary = cell["metrics"][name]
        mean = statistics.fmean(values)
        half = T_975[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))
        assert summary["n"] == len(values), name
        assert summary["mean"] == pytest.approx(mean, rel=1e-9), name
        assert summary["ci95_low"] == pytest.approx(mean - half, rel=1e-9, abs=1e-12), name
        assert summary["ci95_high"] == pytest.approx(mean + half, rel=1e-9, abs=1e-12), name


def test_a_2x3x2_study_runs_all_its_runs_and_summarises_each_cell_from_the_stored_runs(
    api: Api, deployment: str, tmp_path: Path
) -> None:
    axes = [
        {"field": "scheduler.policy", "values": ["uniform", "proportional"]},
        {"field": "scheduler.V", "values": [1, 10, 100]},
        {"field": "seed", "values": [0, 1]},
    ]
    study = _create(api, axes=axes, concurrency=2, baseline={"scheduler.policy": "uniform"})
    assert (study["num_cells"], study["progress"]["runs_total"], study["progress"]["status"]) == (
        6,
        12,
        "queued",
    )
    runs = _runs(api, study["id"])
    assert len(runs) == 12 and sorted(api.dispatcher.enqueued) == [r.id for r in runs]
    assert [(r.policy, r.V, r.config["seed"], r.study_cell) for r in runs[:3]] == [
        ("uniform", 1.0, 0, 0),
        ("uniform", 1.0, 1, 0),
        ("uniform", 10.0, 0, 1),
    ]

    # embedded: in this process (twelve spawned processes would cost a minute; the concurrency test
    # below runs a study through the embedded executor); production: the Celery worker
    statuses = run_here(api, study["id"], tmp_path) if deployment == EMBEDDED else _run_all(api, study["id"])
    assert statuses == ["succeeded"] * 12

    detail = api.client.get(f"/api/studies/{study['id']}", headers=api.as_("viewer")).json()
    assert detail["progress"] == {
        "status": "succeeded",
        "runs_total": 12,
        "runs_done": 12,
        "runs_by_status": {"succeeded": 12},
        "rounds_done": 36,
        "rounds_total": 36,
    }
    assert detail["axes"] == ["scheduler.policy", "scheduler.V"] and detail["seeds"] == [0, 1]
    assert [m["name"] for m in detail["metrics"]] == [m.name for m in FIXED_METRICS]
    by_id = {r.id: r for r in _runs(api, study["id"])}
    for cell in detail["cells"]:
        assert [r["seed"] for r in cell["runs"]] == [0, 1]
        _check_cell(cell, [_figures_of(api, by_id[r["id"]]) for r in cell["runs"]])
        assert cell["metrics"]["time_to_target_s"]["n"] == 0  # analytic runs do not evaluate
        uniform = detail["cells"][cell["baseline_cell"]]
        assert uniform["values"] == {**cell["values"], "scheduler.policy": "uniform"}
        ratio = cell["metrics"]["mean_latency_s"]["mean"] / uniform["metrics"]["mean_latency_s"]["mean"]
        assert cell["ratios"]["mean_latency_s"] == pytest.approx(ratio)

    # the summary table as CSV and Parquet, the report as one self-contained page
    export = f"/api/studies/{study['id']}/export"
    table = list(csv.DictReader(io.StringIO(api.client.get(export, headers=api.as_("viewer")).text)))
    assert [(row["scheduler.policy"], row["scheduler.V"]) for row in table] == [
        (p, v) for p in ("uniform", "proportional") for v in ("1", "10", "100")
    ]
    assert float(table[3]["mean_latency_s"]) == pytest.approx(
        detail["cells"][3]["metrics"]["mean_latency_s"]["mean"]
    )
    parquet = api.client.get(export, params={"format": "parquet"}, headers=api.as_("viewer"))
    assert pq.read_table(io.BytesIO(parquet.content)).num_rows == 6
    page = api.client.get(export, params={"format": "html"}, headers=api.as_("viewer")).text
    assert page.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in page and len(page) > 3_000_000
    assert "<script src" not in page and "<link" not in page  # plotly.js is inlined: no outside request

    # the live stream replays every run's events, each batch followed by the study's progress
    events = api.client.get(f"/api/studies/{study['id']}/events", headers=api.as_("viewer")).text
    assert events.count("event: round\n") == 36 and events.count("event: status\n") == 36
    last = detail["last_event_id"]
    done = api.client.get(
        f"/api/studies/{study['id']}/events", params={"after": last}, headers=api.as_("viewer")
    )
    assert done.status_code == 204


def _unstored(api: Api) -> None:
    with api.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Study)) == 0
        assert session.scalar(select(func.count()).select_from(Run)) == 0
        assert session.scalar(select(func.count()).select_from(RunEvent)) == 0
    assert api.dispatcher.enqueued == []


@pytest.mark.deployments("embedded")
def test_a_study_with_a_bad_cell_is_refused_whole_naming_the_cell(api: Api) -> None:
    body = {
        "name": "bad",
        "bases": [{"config": tiny_config()}],
        "axes": [
            {"field": "scheduler.policy", "values": ["uniform", "no-such-policy"]},
            {"field": "training.microbatch_size", "values": [4, 0]},
            {"field": "seed", "values": [0, 1]},
        ],
    }
    response = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and "3 of the study's 4 cells are invalid" in error["message"]
    named = {(d["cell"], d["axis"], str(d["axis_value"])) for d in error["details"]}
    assert named == {  # every problem of a cell at once: cell 3 names its field and its policy
        (1, "training.microbatch_size", "0"),
        (2, "scheduler.policy", "no-such-policy"),
        (3, "training.microbatch_size", "0"),
        (3, "scheduler.policy", "no-such-policy"),
    }
    assert all(d["seeds"] == [0, 1] and d["message"] for d in error["details"])
    _unstored(api)


@pytest.mark.deployments("embedded")
def test_axes_must_name_config_fields_and_a_study_has_a_size_limit(api: Api) -> None:
    def refused(**body: Any) -> dict[str, Any]:
        body = {"name": "s", "bases": [{"config": tiny_config()}], **body}
        response = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
        assert response.status_code == 422, response.text
        return dict(response.json()["error"])

    unknown = refused(axes=[{"field": "scheduler.VV", "values": [1]}])
    assert unknown["details"][0]["field"] == "axes.0.field" and "'VV'" in unknown["details"][0]["message"]
    inside = refused(axes=[{"field": "seed.x", "values": [1]}])
    assert "not a section" in inside["details"][0]["message"]
    overlap = refused(axes=[{"field": "scheduler", "values": [{}]}, {"field": "scheduler.V", "values": [1]}])
    assert "set the same value" in overlap["details"][0]["message"]
    uneven = refused(
        mode="zip", axes=[{"field": "seed", "values": [1, 2]}, {"field": "scheduler.V", "values": [1]}]
    )
    assert "equal lengths" in uneven["details"][0]["message"]
    too_big = refused(
        axes=[{"field": "seed", "values": list(range(40))}, {"field": "scheduler.V", "values": [1] * 26}]
    )
    assert "1040 runs, more than the 1000" in too_big["message"]
    huge = refused(
        axes=[{"field": "name", "values": ["n" * 70_000]}, {"field": "seed", "values": list(range(1000))}]
    )
    assert "too much config" in huge["message"]
    baseline = refused(axes=[{"field": "scheduler.V", "values": [1, 2]}], baseline={"scheduler.V": 3})
    assert baseline["details"][0]["field"] == "baseline.scheduler.V"
    strict = api.client.post(
        "/api/studies", json={"name": "s", "bases": [{"config": {}}], "extra": 1}, headers=api.as_("operator")
    )
    assert strict.status_code == 422 and strict.json()["error"]["details"][0]["field"] == "body.extra"
    _unstored(api)


@pytest.mark.deployments("embedded")
def test_every_run_of_a_seed_sees_the_same_channel_trace(api: Api) -> None:
    """The core draws a round's channel gains from the run's seed and the round index alone
    (collapipe_core.network.channel_gains), so the cells of one seed meet identical channels."""
    from collapipe_core.network import build_scenario, channel_gains
    from collapipe_core.validation import parse_config

    axes = [
        {"field": "scheduler.policy", "values": ["uniform", "dssda"]},
        {"field": "scheduler.V", "values": [1, 1000]},
        {"field": "seed", "values": [0, 1]},
    ]
    study = _create(api, axes=axes)
    traces: dict[int, list[Any]] = defaultdict(list)
    for run in _runs(api, study["id"]):
        scenario = build_scenario(parse_config(run.config))
        traces[run.config["seed"]].append([channel_gains(scenario, t).tolist() for t in range(5)])
    assert all(trace == same[0] for same in traces.values() for trace in same)
    assert traces[0][0] != traces[1][0]


def _watch_running(api: Api, study_id: int, stop: threading.Event, seen: list[int]) -> None:
    while not stop.is_set():
        with api.session_factory() as session:
            running = session.scalar(
                select(func.count()).select_from(Run).where(Run.study_id == study_id, Run.status == "running")
            )
        seen.append(int(running or 0))
        time.sleep(0.01)


def test_no_more_than_concurrency_runs_of_a_study_run_at_once(api: Api) -> None:
    config = tiny_config(training={"rounds": 4}, scheduler={"policy": SLOW_POLICY})
    study = _create(
        api, bases=[{"config": config}], axes=[{"field": "seed", "values": [0, 1, 2]}], concurrency=1
    )
    seen: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_running, args=(api, study["id"], stop, seen))
    watcher.start()
    try:
        assert _run_all(api, study["id"]) == ["succeeded"] * 3
    finally:
        stop.set()
        watcher.join()
    assert max(seen) == 1
    runs = _runs(api, study["id"])
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at is not None and later.started_at is not None
        assert later.started_at >= earlier.finished_at


@pytest.mark.deployments("production")
def test_a_celery_worker_defers_a_run_of_a_full_study_and_the_finisher_hands_it_over(
    api: Api, request: pytest.FixtureRequest
) -> None:
    study = _create(api, axes=[{"field": "seed", "values": [0, 1, 2]}], concurrency=1)
    held, first, second = (r.id for r in _runs(api, study["id"]))
    store = RunStore(api.session_factory)
    claimed = lifecycle.claim(store, held, "test", 30.0)  # the study's only slot is taken here
    assert isinstance(claimed, tuple)
    api.dispatcher.release()  # the worker gets all three: one held elsewhere, two deferred
    stack: ProductionStack = request.getfixturevalue("production")
    deadline = time.monotonic() + 60
    while stack.dispatch_marks():
        assert time.monotonic() < deadline, stack.dispatch_marks()
        time.sleep(0.05)
    assert [r.status for r in _runs(api, study["id"])] == ["running", "queued", "queued"]
    assert lifecycle.finish(store, claimed[0], "succeeded", None)
    executor = api.dispatcher.real
    assert isinstance(executor, CeleryRunExecutor)
    assert executor.start_deferred(held, "succeeded") == [first]  # as the worker that ran it would
    # the worker that runs the first hands the second over when it ends
    assert [wait_terminal(api.session_factory, r) for r in (first, second)] == ["succeeded"] * 2
    runs = _runs(api, study["id"])
    assert runs[2].started_at is not None and runs[1].finished_at is not None
    assert runs[2].started_at >= runs[1].finished_at


def test_cancel_and_resume_apply_to_every_run_of_the_study(api: Api) -> None:
    config = tiny_config(training={"rounds": 200}, scheduler={"policy": PACED_POLICY})
    study = _create(
        api, bases=[{"config": config}], axes=[{"field": "seed", "values": [0, 1, 2]}], concurrency=2
    )
    study_id = study["id"]
    api.dispatcher.release()
    deadline = time.monotonic() + 60
    while not any(r.status == "running" and r.rounds_done > 0 for r in _runs(api, study_id)):
        assert time.monotonic() < deadline, "no run of the study started"
        time.sleep(0.05)
    response = api.client.post(f"/api/studies/{study_id}/cancel", headers=api.as_("operator"))
    assert response.status_code == 200 and response.json()["runs_changed"] == 3
    assert [wait_terminal(api.session_factory, r.id) for r in _runs(api, study_id)] == ["cancelled"] * 3
    assert all(r.rounds_done < 200 for r in _runs(api, study_id))
    after = api.client.get(f"/api/studies/{study_id}", headers=api.as_("viewer")).json()["progress"]
    assert (after["status"], after["runs_done"]) == ("cancelled", 3)

    resumed = api.client.post(f"/api/studies/{study_id}/resume", headers=api.as_("operator")).json()
    assert resumed["runs_changed"] == 3 and resumed["study"]["progress"]["status"] in ("queued", "running")
    again = api.client.post(f"/api/studies/{study_id}/cancel", headers=api.as_("operator")).json()
    assert again["runs_changed"] == 3
    assert [wait_terminal(api.session_factory, r.id) for r in _runs(api, study_id)] == ["cancelled"] * 3
