"""SSE endpoints over real HTTP: the all-runs status stream, cookie auth, heartbeats, bad ids.

Runs are held until a test releases them to the deployment's executor, whose live channel the
streams read (the run_events outbox in both; readers poll it embedded, Redis wakes them in production).
"""

from __future__ import annotations

import threading
import time
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


def _token_for(server: Server, admin_headers: dict[str, str], user_id: int) -> tuple[int, str]:
    created = httpx.post(
        f"{server.url}/api/tokens", json={"name": "stream", "user_id": user_id}, headers=admin_headers
    ).json()
    return created["id"], created["token"]


def _read_until_end(
    response: httpx.Response, started: threading.Event, lines: list[tuple[float, str]]
) -> None:
    for line in response.iter_lines():
        lines.append((time.monotonic(), line))
        if line.startswith(": keepalive"):
            started.set()


@pytest.mark.parametrize("path", ["/api/runs/events", "/api/runs/{run_id}/events"])
def test_a_revoked_tokens_open_stream_ends_within_one_heartbeat(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session], path: str
) -> None:
    heartbeat_s = 2.0
    viewer_id, _ = add_user(session_factory, "vic", "viewer")
    _, admin_token = add_user(session_factory, "adm", "admin")
    admin = {"Authorization": f"Bearer {admin_token}"}
    with serve(app_factory(RecordingDispatcher(), sse_heartbeat_s=heartbeat_s)) as url:
        server = Server(url, admin, session_factory, RecordingDispatcher())
        run_id = httpx.post(f"{url}/api/runs", json={"config": tiny_config()}, headers=admin).json()["id"]
        token_id, token = _token_for(server, admin, viewer_id)
        lines: list[tuple[float, str]] = []
        started = threading.Event()
        with httpx.stream(
            "GET", url + path.format(run_id=run_id), headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as response:
            assert response.status_code == 200
            reader = threading.Thread(target=_read_until_end, args=(response, started, lines))
            reader.start()
            assert started.wait(10), lines  # the stream is open and idle
            assert httpx.delete(f"{url}/api/tokens/{token_id}", headers=admin).status_code == 200
            revoked_at = time.monotonic()
            reader.join(timeout=10)
            assert not reader.is_alive(), "the stream kept going after its token was revoked"
        ended_at, last = next((t, line) for t, line in reversed(lines) if line.startswith("event:"))
        assert last == "event: revoked" and ended_at - revoked_at <= heartbeat_s + 1.0, ended_at - revoked_at
        again = httpx.get(url + path.format(run_id=run_id), headers={"Authorization": f"Bearer {token}"})
        assert again.status_code == 401


def test_a_deleted_users_browser_stream_ends(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> None:
    viewer_id, _ = add_user(session_factory, "gone", "viewer")
    _, admin_token = add_user(session_factory, "adm", "admin")
    admin = {"Authorization": f"Bearer {admin_token}"}
    with (
        serve(app_factory(RecordingDispatcher(), sse_heartbeat_s=1.0)) as url,
        httpx.Client(base_url=url) as browser,
    ):
        assert (
            browser.post("/api/auth/login", json={"username": "gone", "password": PASSWORD}).status_code
            == 200
        )
        lines: list[tuple[float, str]] = []
        started = threading.Event()
        with browser.stream("GET", "/api/runs/events", timeout=30) as response:
            reader = threading.Thread(target=_read_until_end, args=(response, started, lines))
            reader.start()
            assert started.wait(10)
            assert httpx.delete(f"{url}/api/users/{viewer_id}", headers=admin).status_code == 204
            reader.join(timeout=10)
            assert not reader.is_alive()
        assert [line for _, line in lines if line.startswith("event:")][-1] == "event: revoked"


def test_streams_hold_no_database_connection_while_they_wait(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> None:
    """A pool of 2 connections serves 12 open streams, the API and readiness (before, each stream
    held its token check's connection while it waited for a second one, and the API froze)."""
    _, token = add_user(session_factory, "op", "operator")
    headers = {"Authorization": f"Bearer {token}"}
    app = app_factory(RecordingDispatcher(), db_pool_size=2, db_max_overflow=0)
    with serve(app) as url:
        run_id = httpx.post(f"{url}/api/runs", json={"config": tiny_config()}, headers=headers).json()["id"]
        stop = threading.Event()
        opened: list[int] = []

        def hold(path: str) -> None:
            with httpx.stream("GET", url + path, headers=headers, timeout=30) as response:
                opened.append(response.status_code)
                for _ in response.iter_lines():
                    if stop.is_set():
                        return

        paths = ["/api/runs/events", f"/api/runs/{run_id}/events"] * 6
        threads = [threading.Thread(target=hold, args=(p,), daemon=True) for p in paths]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while len(opened) < len(paths) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            assert opened == [200] * len(paths)
            assert httpx.get(f"{url}/api/runs", headers=headers, timeout=10).status_code == 200
            ready = httpx.get(f"{url}/readyz", timeout=10)
            assert ready.status_code == 200, ready.text
        finally:
            stop.set()


def test_readiness_reports_a_starved_connection_pool(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> None:
    app = app_factory(RecordingDispatcher(), db_pool_size=1, db_max_overflow=0, readiness_timeout_s=0.5)
    with serve(app) as url:
        assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200
        held = app.state.engine.connect()  # the pool's only connection, as a stuck request would
        try:
            starved = httpx.get(f"{url}/readyz", timeout=10)
        finally:
            held.close()
        assert starved.status_code == 503
        assert starved.json()["checks"]["database"].startswith("starved: no connection free within 0.5 s")
        assert "1 of 1 connections in use" in starved.json()["checks"]["database"]
        assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200


BAD_RESUME_IDS = ["99999999999999999999999-0", "99999999999999999999", "1-2-3", "-1", "abc", "١٢٣", "0" * 70]


def test_resume_ids_of_no_stream_are_refused_with_422(server: Server) -> None:
    response = httpx.post(f"{server.url}/api/runs", json={"config": tiny_config()}, headers=server.headers)
    run_id = response.json()["id"]
    for bad in BAD_RESUME_IDS:
        for path in (f"/api/runs/{run_id}/events", "/api/runs/events"):
            by_query = httpx.get(server.url + path, params={"after": bad}, headers=server.headers, timeout=30)
            assert by_query.status_code == 422, (bad, by_query.text)
            # named as the stream names it, or as request validation does ("header.…", "query.…")
            assert by_query.json()["error"]["details"][0]["field"].endswith("after")
            if bad.isascii():  # HTTP headers are ASCII
                headers = {**server.headers, "Last-Event-ID": bad}
                by_header = httpx.get(server.url + path, headers=headers, timeout=30)
                assert by_header.status_code == 422, (bad, by_header.text)
                assert by_header.json()["error"]["details"][0]["field"].endswith("Last-Event-ID")
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
