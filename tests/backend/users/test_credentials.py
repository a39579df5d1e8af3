"""Callers remembered for a moment (COLLAPIPE_AUTH_CACHE_S): a busy caller's token is not looked up
on every request, a session's end is still enforced, a change of access through the API takes
effect at once, and one made elsewhere (another API process, the database) within the moment."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.db.models import ApiToken
from backend.users import credentials
from backend.users import repository as users_repo
from tests.backend.client import SyncClient
from tests.backend.conftest import PASSWORD, RecordingDispatcher, add_user

pytestmark = pytest.mark.deployments("embedded")  # the same code on both deployments


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The token hashes looked up in the database, in order."""
    seen: list[str] = []
    real = users_repo.token_with_user

    def token_with_user(session: Session, token_hash: str) -> Any:
        seen.append(token_hash)
        return real(session, token_hash)

    monkeypatch.setattr(users_repo, "token_with_user", token_with_user)
    return seen


@pytest.fixture
def client_of(app_factory: Callable[..., FastAPI]) -> Iterator[Callable[..., SyncClient]]:
    clients: list[SyncClient] = []

    def make(**settings: Any) -> SyncClient:
        clients.append(SyncClient(app_factory(RecordingDispatcher(), **settings)))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def test_a_remembered_token_is_not_looked_up_again(
    client_of: Callable[..., SyncClient], session_factory: sessionmaker[Session], lookups: list[str]
) -> None:
    _, token = add_user(session_factory, "vic", "viewer")
    client = client_of()
    answers = [client.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"}) for _ in range(5)]
    assert [a.json()["username"] for a in answers] == ["vic"] * 5
    assert len(lookups) == 1
    client.app.state.last_use.flush()  # every use is still noted
    with session_factory() as session:
        assert session.query(ApiToken).one().last_used_at is not None


def test_without_the_moment_every_request_looks_the_token_up(
    client_of: Callable[..., SyncClient], session_factory: sessionmaker[Session], lookups: list[str]
) -> None:
    _, token = add_user(session_factory, "vic", "viewer")
    client = client_of(auth_cache_s=0)
    for _ in range(3):
        assert client.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert len(lookups) == 3


def test_a_change_of_access_through_the_api_takes_effect_at_once(
    client_of: Callable[..., SyncClient], session_factory: sessionmaker[Session]
) -> None:
    operator_id, operator_token = add_user(session_factory, "olga", "operator")
    _, admin_token = add_user(session_factory, "ada", "admin")
    operator = {"Authorization": f"Bearer {operator_token}"}
    admin = {"Authorization": f"Bearer {admin_token}"}
    client = client_of(auth_cache_s=60)  # remembered far longer than the test lasts
    experiment = {"name": "e", "config": {"name": "x"}}
    assert client.get("/api/auth/me", headers=operator).json()["role"] == "operator"
    assert client.patch(f"/api/users/{operator_id}", json={"role": "viewer"}, headers=admin).is_success
    assert client.get("/api/auth/me", headers=operator).json()["role"] == "viewer"
    assert client.post("/api/experiments", json=experiment, headers=operator).status_code == 403
    assert client.post(f"/api/users/{operator_id}/deactivate", headers=admin).is_success
    assert client.get("/api/auth/me", headers=operator).status_code == 401


def test_a_change_made_elsewhere_takes_effect_once_the_moment_passed(
    client_of: Callable[..., SyncClient], session_factory: sessionmaker[Session]
) -> None:
    _, token = add_user(session_factory, "vic", "viewer")
    bearer = {"Authorization": f"Bearer {token}"}
    client = client_of(auth_cache_s=0.2)
    assert client.get("/api/auth/me", headers=bearer).status_code == 200
    with session_factory() as session:  # as another API process revoking it would
        session.execute(update(ApiToken).values(revoked_at=utcnow()))
        session.commit()
    time.sleep(0.3)
    assert client.get("/api/auth/me", headers=bearer).status_code == 401


def test_a_remembered_session_past_its_end_is_refused(
    client_of: Callable[..., SyncClient],
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_user(session_factory, "vic", "viewer")
    client = client_of(auth_cache_s=60, session_ttl_s=3600)
    assert client.post("/api/auth/login", json={"username": "vic", "password": PASSWORD}).is_success
    assert client.get("/api/auth/me").status_code == 200  # remembered now
    later = utcnow() + timedelta(hours=2)
    monkeypatch.setattr(credentials, "utcnow", lambda: later)
    assert client.get("/api/auth/me").status_code == 401


def test_a_password_change_by_a_remembered_caller_is_stored(
    client_of: Callable[..., SyncClient], session_factory: sessionmaker[Session]
) -> None:
    """The caller a request gets is its own copy, not tied to the request's transaction: the change
    is made on the user's row in the request's transaction."""
    add_user(session_factory, "vic", "viewer")
    client = client_of(auth_cache_s=60)
    assert client.post("/api/auth/login", json={"username": "vic", "password": PASSWORD}).is_success
    assert client.get("/api/auth/me").status_code == 200
    change = {"current_password": PASSWORD, "new_password": "a new secret"}
    same_origin = {"Origin": "http://testserver"}  # a cookie's POST comes from the dashboard's page
    assert client.post("/api/auth/password", json=change, headers=same_origin).status_code == 204
    for password, status in (("a new secret", 200), (PASSWORD, 401)):
        client.cookies.clear()
        assert (
            client.post("/api/auth/login", json={"username": "vic", "password": password}).status_code
            == status
        )
