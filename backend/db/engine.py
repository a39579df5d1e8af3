"""Engines and session factories. SQLite gets WAL, a busy timeout and enforced foreign keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

SessionFactory = Callable[[], Session]

SQLITE_BUSY_TIMEOUT_MS = 10_000


def make_engine(database_url: str, **kwargs: Any) -> Engine:
    """An engine for ``database_url``; on SQLite every connection runs the PRAGMAs below."""
    if database_url.startswith("sqlite"):
        engine = create_engine(database_url, connect_args={"check_same_thread": False}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(database_url, pool_pre_ping=True, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (routers return objects after committing)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def ping(engine: Engine) -> None:
    """Raise if the database does not answer."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
