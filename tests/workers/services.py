"""Real PostgreSQL and Redis for tests: a throwaway migrated database, a Redis key namespace.

Shared by tests/workers and tests/integration (and bench/service.py). The servers are the ones on
127.0.0.1 (``.ci/run`` starts them); override with COLLAPIPE_TEST_PG_ADMIN_URL / COLLAPIPE_TEST_REDIS.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import redis

from backend.migrations import upgrade_to_head

PG_ADMIN_URL = os.environ.get("COLLAPIPE_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_BASE_URL = os.environ.get("COLLAPIPE_TEST_REDIS", "redis://127.0.0.1:6379")
TABLES = (
    "run_events",
    "device_metrics",
    "round_metrics",
    "runs",
    "experiments",
    "api_tokens",
    "sessions",
    "users",
)


def _sqlalchemy_url(name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_URL)
    user = info.get("user", "postgres")
    password = f":{info['password']}" if info.get("password") else ""
    host, port = info.get("host", "127.0.0.1"), info.get("port", "5432")
    return f"postgresql+psycopg://{user}{password}@{host}:{port}/{name}"


@contextmanager
def fresh_postgres_database(prefix: str = "collapipe_test") -> Iterator[str]:
    """Create a database, migrate it to head, yield its SQLAlchemy URL; drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _sqlalchemy_url(name)
    try:
        with warnings.catch_warnings():
            # alembic.ini without path_separator (backend's file): a DeprecationWarning, not a fault
            warnings.filterwarnings("ignore", message="No path_separator found", category=DeprecationWarning)
            upgrade_to_head(url)
        yield url
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


EVENT_SEQUENCES = ("run_events_id_seq", "run_events_position_seq")


def truncate_all(database_url: str) -> None:
    """Empty every service table between tests sharing one database. Ids restart, except the live
    events' ids and positions: positions are SSE event ids, never reused (an API process serving the
    tests keeps the newest ones in memory, as it would in production)."""
    plain = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        last = {name: conn.execute(f"SELECT last_value FROM {name}").fetchone() for name in EVENT_SEQUENCES}
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        for name, row in last.items():
            if row is not None:
                conn.execute("SELECT setval(%s, %s)", (name, row[0]))


def delete_keys(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (nothing else: other sessions may share the database)."""
    client: Any = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@contextmanager
def redis_namespace(db: int, label: str = "test") -> Iterator[tuple[str, str]]:
    """Yield (URL of Redis db ``db``, a key prefix of our own); the prefix's keys are deleted after.

    The prefix (COLLAPIPE_REDIS_KEY_PREFIX) keeps concurrent test sessions on one Redis apart: their
    queues, streams and marks never meet, and cleaning up never touches another session's keys.
    """
    url = f"{REDIS_BASE_URL}/{db}"
    prefix = f"{label}-{uuid.uuid4().hex[:8]}:"
    try:
        yield url, prefix
    finally:
        delete_keys(url, prefix)
