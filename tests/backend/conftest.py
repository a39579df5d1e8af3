"""Backend test fixtures: the two deployments, their databases, the app, users of every role.

``deployment`` is parametrised over ``embedded`` (SQLite, local runner, DB-tailing live channel) and
``production`` (PostgreSQL, a real Celery worker on Redis, live wake-ups through Redis; marked
postgres, redis and celery), so every test that uses it, directly or through ``database_url``,
``session_factory``, ``settings``, ``app_factory`` or ``api``, runs on both. A test about one
deployment only says so with ``@pytest.mark.deployments("embedded")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
from tests.backend.builders import TEST_POLICIES
from tests.backend.client import SyncClient
from tests.backend.databases import postgres_database, sqlite_url
from tests.backend.deployments import (
    LEASE_S,
    ProductionStack,
    RecordingDispatcher,
    production_stack,
    real_dispatcher,
    wait_terminal,
)
from tests.deployment_params import EMBEDDED, deployment_params

__all__ = ["PASSWORD", "Api", "RecordingDispatcher", "add_user"]

ROLES = ("viewer", "operator", "admin")
PASSWORD = "correct horse battery"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``deployment`` over both deployments, or those a ``deployments`` marker names."""
    if "deployment" in metafunc.fixturenames:
        metafunc.parametrize("deployment", deployment_params(metafunc), indirect=True)


@pytest.fixture(autouse=True)
def _fast_password_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """argon2 with production parameters costs ~250 ms a hash on 2 cores; tests need no hardness."""
    from backend.users import security

    monkeypatch.setattr(security, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throwaway PostgreSQL database for tests that need their own schemas (migrations)."""
    with postgres_database() as url:
        yield url


@pytest.fixture(scope="session")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionStack]:
    """PostgreSQL + Redis + one real Celery worker process, shared by the session's production tests."""
    with production_stack(tmp_path_factory.mktemp("production")) as stack:
        yield stack


@pytest.fixture
def deployment(request: pytest.FixtureRequest) -> Iterator[str]:
    """``embedded`` or ``production``; a production test starts on empty tables and an idle worker."""
    name: str = request.param
    if name == EMBEDDED:
        yield name
        return
    stack: ProductionStack = request.getfixturevalue("production")
    stack.reset()
    yield name
    stack.quiesce()


@pytest.fixture
def database_url(deployment: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if deployment == EMBEDDED:
        return sqlite_url(tmp_path)
    stack: ProductionStack = request.getfixturevalue("production")
    return stack.database_url


@pytest.fixture
def session_factory(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(database_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def settings(deployment: str, database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    common: dict[str, Any] = {
        "database_url": database_url,
        "sse_poll_interval_s": 0.02,
        "sse_heartbeat_s": 0.5,
        "dispatch_interval_s": 0.05,
        "lease_s": LEASE_S,
        "max_parallel_runs": 2,
        "threads_per_run": 1,
        "policies": TEST_POLICIES,
        "data_dir": tmp_path / "data",
        "_env_file": None,
    }
    if deployment == EMBEDDED:
        return Settings(artifact_dir=tmp_path / "artifacts", **common)
    stack: ProductionStack = request.getfixturevalue("production")
    return Settings(
        executor="celery",
        redis_url=stack.redis_url,
        redis_key_prefix=stack.redis_prefix,
        artifact_dir=stack.artifact_dir,
        **common,
    )


@pytest.fixture
def app_factory(deployment: str, settings: Settings) -> Callable[..., FastAPI]:
    """``make(dispatcher=None, **settings overrides)``: an app of the deployment.

    Without a dispatcher the app uses the deployment's own executor, as ``collapipe serve`` or the
    production API would. A ``RecordingDispatcher`` holds runs; it gets that executor behind it, for
    its ``release()``.
    """

    def make(dispatcher: Any = None, **overrides: Any) -> FastAPI:
        app = create_app(settings.model_copy(update=overrides), dispatcher=dispatcher)
        if isinstance(dispatcher, RecordingDispatcher) and dispatcher.real is None:
            dispatcher.real = real_dispatcher(deployment, app)
        return app

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

    def run_to_end(self, run_id: int, timeout_s: float = 120.0) -> str:
        """Release held runs to the deployment's executor; wait until ``run_id`` ends; its status."""
        self.dispatcher.release()
        return wait_terminal(self.session_factory, run_id, timeout_s)


@pytest.fixture
def api(app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]) -> Iterator[Api]:
    """The deployment's app behind an in-process client; runs are held until ``run_to_end``."""
    headers: dict[str, dict[str, str]] = {"anonymous": {}}
    ids = {}
    for role in ROLES:
        ids[role], token = add_user(session_factory, role, role)
        headers[role] = {"Authorization": f"Bearer {token}"}
    dispatcher = RecordingDispatcher()
    app = app_factory(dispatcher)
    with SyncClient(app) as client:
        yield Api(client, dispatcher, session_factory, headers, ids, app)
