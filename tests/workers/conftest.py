"""Fixtures of the workers' tests: a flushed Redis db and a migrated PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from backend.db.engine import make_engine, make_session_factory
from backend.settings import Settings
from tests.workers.services import fresh_postgres_database, redis_namespace, truncate_all

REDIS_DB = 12


@pytest.fixture
def _redis_namespace() -> Iterator[tuple[str, str]]:
    with redis_namespace(REDIS_DB, "workers-test") as namespace:
        yield namespace


@pytest.fixture
def redis_url(_redis_namespace: tuple[str, str]) -> str:
    return _redis_namespace[0]


@pytest.fixture
def redis_prefix(_redis_namespace: tuple[str, str]) -> str:
    """This test's Redis key prefix (COLLAPIPE_REDIS_KEY_PREFIX): its keys are deleted afterwards."""
    return _redis_namespace[1]


@pytest.fixture(scope="session")
def _database_url() -> Iterator[str]:
    with fresh_postgres_database("collapipe_workers") as url:
        yield url


@pytest.fixture
def database_url(_database_url: str) -> str:
    truncate_all(_database_url)
    return _database_url


@pytest.fixture
def session_factory(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(database_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def settings(database_url: str, redis_url: str, redis_prefix: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        artifact_dir=tmp_path / "artifacts",
        executor="celery",
        lease_s=5.0,
        run_queue="collapipe.test-runs",
        redis_key_prefix=redis_prefix,
    )
