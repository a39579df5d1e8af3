"""Each deployment end to end: API → executor → DB rows → live channel → SSE.

A real uvicorn server with the deployment's own executor: embedded, the LocalDispatcher (one spawned
process per run, events tailed from the run_events table); production, the Celery dispatcher, the
session's Celery worker and Redis wake-ups. Tests of the local runner's own mechanics (a killed child
process, lease recovery on start, requeue on shutdown) are embedded only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.runtime import lifecycle
from backend.runtime.lifecycle import RunStore
from backend.runtime.local import LocalDispatcher
from tests.backend.builders import SLOW_POLICY, insert_run, stored_records, tiny_config
from tests.backend.conftest import add_user
from tests.backend.live_server import serve
from tests.backend.sse_client import read_stream

SLOW = SLOW_POLICY
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class Embedded:
    url: str
    headers: dict[str, str]
    app: FastAPI
    session_factory: sessionmaker[Session]

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, headers=self.headers, timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers, timeout=30, **kwargs)

    def launch(self, config: dict[str, Any]) -> int:
        response = self.post("/api/runs", json={"config": config})
        assert response.status_code == 201, response.text
        run_id: int = response.json()["id"]
        return run_id

    def wait(
        self, run_id: int, until: Callable[[dict[str, Any]], bool], timeout_s: float = 90.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            run: dict[str, Any] = self.get(f"/api/runs/{run_id}").json()
            if until(run):
                return run
            assert time.monotonic() < deadline, f"run {run_id} stuck: {run}"
            time.sleep(0.05)

    def wait_finished(self, run_id: int) -> dict[str, Any]:
        return self.wait(run_id, lambda r: r["status"] in TERMINAL)

    @property
    def dispatcher(self) -> LocalDispatcher:
        dispatcher: LocalDispatcher = self.app.state.dispatcher
        return dispatcher


@pytest.fixture
def embedded(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> Iterator[Embedded]:
    _, token = add_user(session_factory, "op", "operator")
    app = app_factory()
    with serve(app) as url:
        yield Embedded(url, {"Authorization": f"Bearer {token}"}, app, session_factory)


def _rounds(events: list[tuple[str, str, dict[str, Any]]]) -> list[int]:
    return [data["round"]["round"] for _, kind, data in events if kind == "round"]


def test_a_run_executes_in_a_child_process_and_streams_every_round(embedded: Embedded) -> None:
    run_id = embedded.launch(tiny_config(training={"rounds": 6}))
    events = read_stream(f"{embedded.url}/api/runs/{run_id}/events", embedded.headers)  # live, until the end
    statuses = [data["status"] for _, kind, data in events if kind == "status"]
    assert statuses == ["queued", "running", "succeeded"]
    assert _rounds(events) == [0, 1, 2, 3, 4, 5]
    ids = [tuple(int(part) for part in event_id.split("-")) for event_id, _, _ in events]  # n or ms-seq
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    run = embedded.wait_finished(run_id)
    assert (run["status"], run["rounds_done"], run["attempt"]) == ("succeeded", 6, 1)
    series = embedded.get(f"/api/runs/{run_id}/rounds").json()["series"]["latency_s"]["round"]
    assert series == [0, 1, 2, 3, 4, 5]
    # a client that reconnects after the third round's event gets exactly the rest
    third = next(
        event_id for event_id, kind, data in events if kind == "round" and data["round"]["round"] == 2
    )
    rest = read_stream(f"{embedded.url}/api/runs/{run_id}/events", embedded.headers, last_event_id=third)
    assert _rounds(rest) == [3, 4, 5] and rest[-1][2]["status"] == "succeeded"
    # reconnecting after the last event: nothing left, 204 tells EventSource to stop
    done = httpx.get(
        f"{embedded.url}/api/runs/{run_id}/events",
        headers={**embedded.headers, "Last-Event-ID": events[-1][0]},
    )
    assert done.status_code == 204


def test_cancel_stops_a_running_run_between_rounds(embedded: Embedded) -> None:
    run_id = embedded.launch(tiny_config(training={"rounds": 400}, scheduler={"policy": SLOW}))
    embedded.wait(run_id, lambda r: r["rounds_done"] >= 2)
    response = embedded.post(f"/api/runs/{run_id}/cancel")
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    run = embedded.wait_finished(run_id)
    assert run["status"] == "cancelled" and 2 <= run["rounds_done"] < 400
    assert [r["round"] for r in stored_records(embedded.session_factory, run_id)] == list(
        range(run["rounds_done"])
    )


@pytest.mark.deployments("embedded")
def test_a_killed_run_process_fails_and_resumes_with_every_round_once(embedded: Embedded) -> None:
    config = tiny_config(training={"rounds": 40}, scheduler={"policy": SLOW})
    run_id, reference = embedded.launch(config), embedded.launch(config)  # the reference runs alongside
    embedded.wait(run_id, lambda r: r["rounds_done"] >= 8)
    embedded.dispatcher.children[run_id].process.kill()  # SIGKILL mid-run
    failed = embedded.wait_finished(run_id)
    assert failed["status"] == "failed" and "exited with code -9" in failed["error"]
    assert embedded.post(f"/api/runs/{run_id}/resume").json()["status"] == "queued"
    run = embedded.wait_finished(run_id)
    assert (run["status"], run["rounds_done"], run["attempt"]) == ("succeeded", 40, 2)
    assert embedded.wait_finished(reference)["status"] == "succeeded"
    resumed = stored_records(embedded.session_factory, run_id)
    assert [r["round"] for r in resumed] == list(range(40))  # no gap, no duplicate
    assert resumed == stored_records(embedded.session_factory, reference)


def test_a_fork_reproduces_the_parent_up_to_its_round(embedded: Embedded) -> None:
    parent = embedded.launch(tiny_config(training={"rounds": 6}))
    assert embedded.wait_finished(parent)["status"] == "succeeded"
    response = embedded.post(
        f"/api/runs/{parent}/fork", json={"round": 3, "policy": "fixed", "segments": [1, 1, 2]}
    )
    assert response.status_code == 201, response.text
    fork = response.json()["id"]
    assert embedded.wait_finished(fork)["status"] == "succeeded"
    parent_records = stored_records(embedded.session_factory, parent)
    fork_records = stored_records(embedded.session_factory, fork)
    assert fork_records[:3] == parent_records[:3]
    assert [r["policy"] for r in fork_records[3:]] == ["fixed"] * 3


@pytest.mark.deployments("embedded")
def test_recover_requeues_runs_whose_lease_expired(
    session_factory: sessionmaker[Session], app_factory: Callable[..., FastAPI]
) -> None:
    stale = insert_run(session_factory, status="running", lease_owner="gone", lease_expires_at=utcnow())
    live = insert_run(
        session_factory, status="running", lease_owner="alive", lease_expires_at=utcnow().replace(year=2999)
    )
    dispatcher = app_factory().state.dispatcher
    assert dispatcher.recover() == [stale]
    assert lifecycle.startable_run_ids(RunStore(session_factory), 10) == [stale]
    assert live not in lifecycle.startable_run_ids(RunStore(session_factory), 10)


@pytest.mark.deployments("embedded")
def test_the_dispatcher_logs_a_database_outage_once_not_every_tick(
    app_factory: Callable[..., FastAPI], caplog: pytest.LogCaptureFixture
) -> None:
    dispatcher = app_factory(dispatch_interval_s=0.001).state.dispatcher
    ticks = {"count": 0}

    def tick() -> None:
        ticks["count"] += 1
        if ticks["count"] <= 20:  # the database is unavailable for 20 ticks, then answers
            raise OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))

    dispatcher.tick = tick

    async def loop_for_a_while() -> None:
        task = asyncio.create_task(dispatcher._loop())
        while ticks["count"] < 25:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="backend.runtime.local"):
        asyncio.run(loop_for_a_while())
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "backend.runtime.local"]
    assert [level for level, _ in logged] == ["WARNING", "WARNING"], logged
    assert "database is unavailable" in logged[0][1] and "answers again" in logged[1][1]


@pytest.mark.deployments("embedded")
def test_stopping_the_server_requeues_its_running_runs(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> None:
    _, token = add_user(session_factory, "op", "operator")
    headers = {"Authorization": f"Bearer {token}"}
    with serve(app_factory()) as url:
        embedded = Embedded(url, headers, FastAPI(), session_factory)
        run_id = embedded.launch(tiny_config(training={"rounds": 400}, scheduler={"policy": SLOW}))
        embedded.wait(run_id, lambda r: r["rounds_done"] >= 2)
    with session_factory() as session:
        from backend.db.models import Run

        run = session.get(Run, run_id)
        assert run is not None and (run.status, run.lease_owner) == ("queued", None)
        assert 2 <= run.rounds_done < 400  # continues from its checkpoint on the next start


@pytest.mark.deployments("embedded")
def test_sigkill_at_every_point_of_a_round_loses_and_repeats_nothing(
    embedded: Embedded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run process dies inside a round's transaction, right after it, between the checkpoint's
    write and rename, and inside the final status change (collapipe_core/faults.py); each time the
    run fails, is resumed, and in the end the stream carries every round exactly once."""
    points = (
        "round-before-commit@2",
        "round-after-commit@4",
        "checkpoint-write@7",
        "status-change@succeeded",
    )
    markers = tmp_path / "crashes"
    markers.mkdir()
    monkeypatch.setenv("COLLAPIPE_CRASH_AT", ",".join(points))  # inherited by the spawned run processes
    monkeypatch.setenv("COLLAPIPE_CRASH_MARKER", str(markers))
    config = tiny_config(training={"rounds": 10})
    run_id = embedded.launch(config)
    for _ in points:
        failed = embedded.wait_finished(run_id)
        assert failed["status"] == "failed" and "exited with code -9" in failed["error"], failed
        assert embedded.post(f"/api/runs/{run_id}/resume").json()["status"] == "queued"
    run = embedded.wait_finished(run_id)
    assert (run["status"], run["rounds_done"]) == ("succeeded", 10)
    assert sorted(p.name for p in markers.iterdir()) == sorted(points)  # each crash happened
    events = read_stream(f"{embedded.url}/api/runs/{run_id}/events", embedded.headers)
    assert _rounds(events) == list(range(10))
    assert [r["round"] for r in stored_records(embedded.session_factory, run_id)] == list(range(10))
    reference = embedded.launch(config)
    assert embedded.wait_finished(reference)["status"] == "succeeded"
    assert stored_records(embedded.session_factory, run_id) == stored_records(
        embedded.session_factory, reference
    )


def test_runs_execute_at_a_lower_cpu_priority_than_the_api(embedded: Embedded, deployment: str) -> None:
    """The process executing a run (the local run process, or the Celery worker process whose pid its
    claimant names) runs at ``run_nice`` (10) above the API's niceness."""
    run_id = embedded.launch(tiny_config(training={"rounds": 400}, scheduler={"policy": SLOW}))
    embedded.wait(run_id, lambda r: r["rounds_done"] >= 1)
    if deployment == "embedded":
        pid = embedded.dispatcher.children[run_id].process.pid
    else:
        with embedded.session_factory() as session:
            from backend.db.models import Run

            run = session.get(Run, run_id)
            assert run is not None and run.lease_owner is not None
            pid = int(run.lease_owner.split(":")[1])  # host:pid:task:random
    assert pid is not None
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
    assert embedded.post(f"/api/runs/{run_id}/cancel").status_code == 200
    assert embedded.wait_finished(run_id)["status"] == "cancelled"
