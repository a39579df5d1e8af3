"""SSE endpoints over real HTTP: the all-runs status stream, cookie auth, heartbeats, bad ids.

Runs are held until a test releases them to the deployment's executor, whose live channel the
streams read (the run_events table for embedded, Redis Streams for production).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from tests.backend.builders import tiny_config
from tests.backend.conftest import PASSWORD, RecordingDispatcher, add_user
from tests.backend.deployments import wait_terminal
from tests.backend.live_server import serve
from tests.backend.sse_client import iter_events


@dataclass
class Server:
    url: str
    headers: dict[str, str]
    session_factory: sessionmaker[Session]
    dispatcher: RecordingDispatcher


@pytest.fixture
def server(app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]) -> Iterator[Server]:
    _, token = add_user(session_factory, "op", "operator")
    dispatcher = RecordingDispatcher()
    with serve(app_factory(dispatcher)) as url:
        yield Server(url, {"Authorization": f"Bearer {token}"}, session_factory, dispatcher)


def _launch_and_execute(server: Server) -> int:
    response = httpx.post(f"{server.url}/api/runs", json={"config": tiny_config()}, headers=server.headers)
    run_id: int = response.json()["id"]
    server.dispatcher.release()
    assert wait_terminal(server.session_factory, run_id) == "succeeded"
    return run_id


def test_the_status_stream_shows_every_runs_changes_from_now_on(server: Server) -> None:
    _launch_and_execute(server)  # history: not replayed to a new client
    seen: list[tuple[int, str]] = []
    with httpx.stream("GET", f"{server.url}/api/runs/events", headers=server.headers, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        worker = threading.Thread(target=_launch_and_execute, args=(server,))
        worker.start()
        for _, kind, data in iter_events(response):
            assert kind == "status"
            seen.append((data["run_id"], data["status"]))
            if data["status"] == "succeeded":
                break
        worker.join()
    assert seen == [(2, "queued"), (2, "running"), (2, "succeeded")]


def test_event_source_authenticates_with_the_session_cookie(server: Server) -> None:
    run_id = _launch_and_execute(server)
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        assert (
            browser.post("/api/auth/login", json={"username": "op", "password": PASSWORD}).status_code == 200
        )
        with browser.stream("GET", f"/api/runs/{run_id}/events") as response:
            kinds = [kind for _, kind, _ in iter_events(response)]
    assert kinds == ["status", "status"] + ["round"] * 5 + ["status"]  # queued, running, rounds, succeeded


def test_idle_streams_send_heartbeats_and_bad_ids_are_refused(server: Server) -> None:
    response = httpx.post(f"{server.url}/api/runs", json={"config": tiny_config()}, headers=server.headers)
    run_id = response.json()["id"]
    lines: list[str] = []
    with httpx.stream(
        "GET", f"{server.url}/api/runs/{run_id}/events", headers=server.headers, timeout=30
    ) as stream:
        for line in stream.iter_lines():
            lines.append(line)
            if line.startswith(": keepalive"):
                break
    assert lines[0] == "retry: 2000" and any(line.startswith("event: status") for line in lines)
    bad = httpx.get(
        f"{server.url}/api/runs/{run_id}/events",
        headers={**server.headers, "Last-Event-ID": "not-an-id"},
        timeout=30,
    )
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == "Last-Event-ID"
    missing = httpx.get(f"{server.url}/api/runs/999/events", headers=server.headers, timeout=30)
    assert missing.status_code == 404
