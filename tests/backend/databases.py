"""Test databases: a fresh SQLite file, or a fresh schema in a throwaway PostgreSQL database.

``sqlite_url`` is the embedded deployment's per-test database. The production deployment's
database is migrated once per session (tests/backend/deployments.py); ``postgres_database`` and
``postgres_schema`` serve tests that need an empty database of their own (the migrations).

The PostgreSQL server is COLLAPIPE_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test);
``postgres_database`` creates ``collapipe_test_<random>`` and drops it at the end, and
``postgres_schema`` gives a schema in it (selected through the connection's search_path, so child
processes that receive the URL see the same schema).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import make_url, text

from backend.db.base import Base
from backend.db.engine import make_engine

SERVER_URL = os.environ.get(
    "COLLAPIPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new database for this test session; dropped afterwards."""
    name = f"collapipe_test_{uuid.uuid4().hex[:10]}"
    admin = make_engine(SERVER_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(SERVER_URL).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@contextmanager
def postgres_schema(database_url: str, create_tables: bool = True) -> Iterator[str]:
    """A fresh schema in ``database_url``; yields a URL whose connections use it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = make_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
        rendered = url.render_as_string(hide_password=False)
        if create_tables:
            _create_tables(rendered)
        yield rendered
        with admin.connect() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()


def sqlite_url(directory: Path, create_tables: bool = True) -> str:
    url = f"sqlite:///{directory / 'collapipe.db'}"
    if create_tables:
        _create_tables(url)
    return url


def _create_tables(url: str) -> None:
    engine = make_engine(url)
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()
