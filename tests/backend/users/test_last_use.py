"""Last use of API tokens and browser sessions: recorded in memory, written in a short transaction of
its own, never inside a request's transaction (a slow request must not hold a write lock)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from backend.db.base import utcnow
from backend.db.models import ApiToken, BrowserSession
from backend.experiments import service as experiments
from tests.backend.builders import tiny_config
from tests.backend.conftest import PASSWORD, Api


def test_a_slow_request_on_a_token_neither_blocks_nor_fails_other_writes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's request is held inside its endpoint (before it writes anything); meanwhile the
    same token's other requests and another user's POST complete (they would wait for, then fail on,
    the write lock of a last-use stamp taken inside the held request's transaction)."""
    entered, release = threading.Event(), threading.Event()
    real = experiments.create

    def held(session: Any, owner: Any, body: Any, workspace: Any) -> Any:
        if body.name == "held":
            entered.set()
            assert release.wait(60), "the test never released the held request"
        return real(session, owner, body, workspace)

    monkeypatch.setattr(experiments, "create", held)
    operator = api.as_("operator")
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(
            api.client.post,
            "/api/experiments",
            json={"name": "held", "config": tiny_config()},
            headers=operator,
        )
        try:
            assert entered.wait(60)
            same_token = [
                api.client.post(
                    "/api/experiments", json={"name": f"e{i}", "config": tiny_config()}, headers=operator
                )
                for i in range(3)
            ]
            other_user = api.client.post(
                "/api/runs", json={"config": tiny_config()}, headers=api.as_("admin")
            )
            assert not slow.done()  # everything above completed while the slow request was held
        finally:
            release.set()
        assert slow.result().status_code == 201
    assert [r.status_code for r in same_token] == [201, 201, 201], [r.text for r in same_token]
    assert other_user.status_code == 201, other_user.text


def test_last_use_is_written_when_the_stamps_are_flushed(api: Api) -> None:
    assert api.client.get("/api/auth/me", headers=api.as_("viewer")).status_code == 200
    api.app.state.last_use.flush()
    with api.session_factory() as session:
        stamped = {t.user_id: t.last_used_at for t in session.query(ApiToken)}
    assert stamped[api.user_ids["viewer"]] is not None
    assert stamped[api.user_ids["operator"]] is None  # not used
    listed = api.client.get("/api/tokens", headers=api.as_("admin")).json()
    assert next(t for t in listed if t["user_id"] == api.user_ids["viewer"])["last_used_at"] is not None


@pytest.mark.parametrize(("idle_h", "status"), [(1, 200), (13, 401)])
def test_a_session_unused_for_longer_than_the_idle_timeout_ends(api: Api, idle_h: int, status: int) -> None:
    assert api.client.post("/api/auth/login", json={"username": "viewer", "password": PASSWORD}).is_success
    since = utcnow() - timedelta(hours=idle_h)  # the default idle timeout is 12 h
    with api.session_factory() as session:
        session.execute(update(BrowserSession).values(created_at=since, last_used_at=since))
        session.commit()
    assert api.client.get("/api/auth/me").status_code == status
