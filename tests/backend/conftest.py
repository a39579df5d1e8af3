"""Backend test fixtures: databases (SQLite and PostgreSQL), the app, users of every role.

``database_url`` is parametrised over both databases, so every test that uses it (directly or via
``api``) runs on SQLite and, marked ``postgres``, on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from argon2 import PasswordHasher
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.db.engine import make_engine, make_session_factory
from backend.db.models import ApiToken, User
from backend.settings import Settings
from backend.users.security import hash_password, hash_secret
from tests.backend.client import SyncClient
from tests.backend.databases import postgres_database, postgres_schema, sqlite_url

ROLES = ("viewer", "operator", "admin")
PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def _fast_password_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """argon2 with production parameters costs ~250 ms a hash on 2 cores; tests need no hardness."""
    from backend.users import security

    monkeypatch.setattr(security, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
    else:
        with postgres_schema(request.getfixturevalue("pg_database")) as url:
            yield url


@pytest.fixture
def session_factory(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(database_url)
    yield make_session_factory(engine)
    engine.dispose()


@dataclass
class RecordingDispatcher:
    """Remembers what was enqueued and runs nothing (API tests need no executor)."""

    enqueued: list[int] = field(default_factory=list)
    ready_problem: str | None = None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def enqueue(self, run_id: int) -> None:
        self.enqueued.append(run_id)

    def check_ready(self) -> str | None:
        return self.ready_problem

    def queue_depth(self) -> int | None:
        return None


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        artifact_dir=tmp_path / "artifacts",
        sse_poll_interval_s=0.02,
        sse_heartbeat_s=0.5,
        dispatch_interval_s=0.05,
        lease_s=30.0,
        max_parallel_runs=2,
        threads_per_run=1,
        _env_file=None,
    )


@pytest.fixture
def app_factory(settings: Settings) -> Callable[..., FastAPI]:
    def make(dispatcher: Any = None, **overrides: Any) -> FastAPI:
        return create_app(settings.model_copy(update=overrides), dispatcher=dispatcher)

    return make


def add_user(factory: sessionmaker[Session], username: str, role: str) -> tuple[int, str]:
    """A user with password PASSWORD and an API token; returns (id, token)."""
    token = f"cp_test_{username}_token_0123456789"
    with factory() as session:
        user = User(username=username, password_hash=hash_password(PASSWORD), role=role)
        session.add(user)
        session.flush()
        session.add(ApiToken(user_id=user.id, name="test", token_hash=hash_secret(token)))
        session.commit()
        return user.id, token


@dataclass
class Api:
    client: SyncClient
    dispatcher: RecordingDispatcher
    session_factory: sessionmaker[Session]
    headers: dict[str, dict[str, str]]
    user_ids: dict[str, int]
    app: FastAPI

    def as_(self, role: str) -> dict[str, str]:
        return self.headers[role]


@pytest.fixture
def api(app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]) -> Iterator[Api]:
    headers: dict[str, dict[str, str]] = {"anonymous": {}}
    ids = {}
    for role in ROLES:
        ids[role], token = add_user(session_factory, role, role)
        headers[role] = {"Authorization": f"Bearer {token}"}
    dispatcher = RecordingDispatcher()
    app = app_factory(dispatcher)
    with SyncClient(app) as client:
        yield Api(client, dispatcher, session_factory, headers, ids, app)
