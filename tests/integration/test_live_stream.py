"""The live stream through the API (SSE over the outbox, woken through Redis): a client that drops
the connection mid-run and reconnects with Last-Event-ID misses nothing and sees nothing twice; a late client
replays everything; the all-runs stream carries the status changes."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack
from tests.integration.runs import TERMINAL, config_json, get_run, launch, wait_for
from tests.integration.sse import SseEvent, sse_events

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]

ROUNDS = 40


def _read(
    stack: Stack, path: str, last_event_id: str | None = None, stop_after_rounds: int = 0
) -> list[SseEvent]:
    """Events until the server ends the stream, or until ``stop_after_rounds`` rounds (then hang up)."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    events: list[SseEvent] = []
    with stack.client() as client, client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response):
            events.append(event)
            if stop_after_rounds and sum(e.kind == "round" for e in events) >= stop_after_rounds:
                break
    return events


def test_reconnecting_with_last_event_id_misses_nothing(stack: Stack) -> None:
    stack.processes.start_worker()
    with stack.client() as client:
        run_id = launch(client, config_json(ROUNDS))
        path = f"/api/runs/{run_id}/events"
        first = _read(stack, path, stop_after_rounds=5)  # hang up mid-run
        assert get_run(client, run_id)["status"] == "running"
        second = _read(stack, path, last_event_id=first[-1].id)  # until the run's end
        run = wait_for(client, run_id, 30, stack.processes.logs, status=TERMINAL)
    assert run["status"] == "succeeded"

    joined = first + second
    ids = [e.id for e in joined]
    assert len(set(ids)) == len(ids)
    assert [e.data["round"]["round"] for e in joined if e.kind == "round"] == list(range(ROUNDS))
    assert [e.data["status"] for e in joined if e.kind == "status"] == ["queued", "running", "succeeded"]

    late = _read(stack, path)  # a client arriving after the end replays the whole run
    assert [(e.id, e.kind, e.data) for e in late] == [(e.id, e.kind, e.data) for e in joined]


def test_the_all_runs_stream_carries_status_changes(stack: Stack) -> None:
    stack.processes.start_worker()
    with stack.client() as client:
        run_id = launch(client, config_json(3, executor="analytic"))
        wait_for(client, run_id, 30, stack.processes.logs, status=TERMINAL)
    seen: list[str] = []
    with (
        stack.client() as client,
        client.stream("GET", "/api/runs/events", headers={"Last-Event-ID": "0"}) as r,
    ):
        assert r.status_code == 200
        for event in sse_events(r):
            assert event.kind == "status" and event.data["run_id"] == run_id
            seen.append(event.data["status"])
            if event.data["status"] in TERMINAL:
                break
    assert seen == ["queued", "running", "succeeded"]
