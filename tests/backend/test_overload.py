"""An API process under more load than it can serve: requests past COLLAPIPE_MAX_REQUESTS_IN_FLIGHT
get 503 with Retry-After at once and change nothing, probes still answer, and once the load ends
the next request is served; many requests on a small database pool are all served (none waits for a
thread while it holds a pooled connection, the lock-up that only the pool's timeout undid)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

import backend.app
from backend.db.models import Experiment
from backend.overload import is_exempt
from backend.runs import service as runs
from tests.backend.builders import tiny_config
from tests.backend.client import SyncClient
from tests.backend.conftest import RecordingDispatcher, add_user

pytestmark = pytest.mark.deployments("embedded")  # the middleware and the pools are the same on both


def test_probes_streams_and_uploads_are_not_counted() -> None:
    assert all(
        is_exempt(method, path)
        for method, path in (
            ("GET", "/healthz"),
            ("GET", "/readyz"),
            ("GET", "/api/runs/events"),
            ("GET", "/api/runs/12/events"),
            ("GET", "/api/studies/3/events"),
            ("PUT", "/api/files/datasets/big.parquet"),
        )
    )
    assert not any(
        is_exempt(method, path)
        for method, path in (
            ("GET", "/api/runs"),
            ("GET", "/api/runs/12"),
            ("GET", "/api/runs/12/events/x"),
            ("GET", "/api/files"),
            ("DELETE", "/api/files/datasets/big.parquet"),
            ("GET", "/metrics"),
        )
    )


def test_requests_past_the_limit_get_503_at_once_and_the_next_one_after_the_load_is_served(
    app_factory: Callable[..., FastAPI],
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, token = add_user(session_factory, "op", "operator")
    headers = {"Authorization": f"Bearer {token}"}
    entered, release = threading.Semaphore(0), threading.Event()
    held_calls = iter(range(2))  # the first two listings are held inside the endpoint
    real_page = runs.page

    def page(*args: Any) -> Any:
        if next(held_calls, None) is not None:
            entered.release()
            assert release.wait(60), "the test never released the held requests"
        return real_page(*args)

    monkeypatch.setattr(runs, "page", page)
    app = app_factory(RecordingDispatcher(), max_requests_in_flight=2)
    with SyncClient(app) as client, ThreadPoolExecutor(2) as pool:
        held = [pool.submit(client.get, "/api/runs", headers=headers) for _ in range(2)]
        try:
            assert entered.acquire(timeout=60) and entered.acquire(timeout=60)
            listing = client.get("/api/runs", headers=headers)
            experiment = {"name": "e", "config": tiny_config()}
            launch = client.post("/api/experiments", json=experiment, headers=headers)
            health, readiness = client.get("/healthz"), client.get("/readyz")
        finally:
            release.set()
        assert [f.result().status_code for f in held] == [200, 200]
        after = client.get("/api/runs", headers=headers)  # the load is over: served at once
    for shed in (listing, launch):
        assert shed.status_code == 503, shed.text
        assert shed.headers["Retry-After"] == "1"
        assert shed.json()["error"]["code"] == "overloaded"
        assert "COLLAPIPE_MAX_REQUESTS_IN_FLIGHT" in shed.json()["error"]["message"]
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Experiment)) == 0  # nothing stored
    assert health.status_code == 200 and readiness.status_code == 200
    assert after.status_code == 200


def test_many_requests_on_a_small_pool_are_all_served(
    app_factory: Callable[..., FastAPI],
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """60 listings at once on 2 pooled connections. A request used to take a worker thread and a
    pooled connection for its token check, then wait for another thread for its endpoint while the
    40 threads waited for connections: nothing moved until the pool's timeout (here 5 s) failed them."""
    real_make_engine = backend.app.make_engine
    monkeypatch.setattr(
        backend.app, "make_engine", lambda url, **kw: real_make_engine(url, pool_timeout=5.0, **kw)
    )
    _, token = add_user(session_factory, "viewer", "viewer")
    headers = {"Authorization": f"Bearer {token}"}
    app = app_factory(RecordingDispatcher(), db_pool_size=2, db_max_overflow=0, max_requests_in_flight=60)
    with SyncClient(app) as client, ThreadPoolExecutor(60) as pool:
        assert client.get("/api/runs", headers=headers).status_code == 200
        answers = list(pool.map(lambda _: client.get("/api/runs", headers=headers), range(60)))
    assert [a.status_code for a in answers] == [200] * 60, {a.status_code: a.text for a in answers}
