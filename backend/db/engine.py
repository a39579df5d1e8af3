"""Engines and session factories. SQLite gets WAL, a busy timeout and enforced foreign keys."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, text
from sqlalchemy.orm import Session, sessionmaker

SessionFactory = Callable[[], Session]

SQLITE_BUSY_TIMEOUT_MS = 10_000
# a pooled connection idle longer than this is pinged before use (a busy one was just proven alive)
PING_AFTER_IDLE_S = 1.0
_RETURNED_AT = "returned_at"


def make_engine(database_url: str, **kwargs: Any) -> Engine:
    """An engine for ``database_url``; on SQLite every connection runs the PRAGMAs below.

    On a server database a connection that sat idle in the pool for more than ``PING_AFTER_IDLE_S``
    is pinged when checked out, and replaced if the ping fails (the database restarted, a proxy
    dropped it). Unlike ``pool_pre_ping`` this spares a round trip per request under steady load.
    """
    if database_url.startswith("sqlite"):
        engine = create_engine(database_url, connect_args={"check_same_thread": False}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(database_url, **kwargs)
    event.listen(engine, "checkin", _stamp_return)
    event.listen(engine, "checkout", _ping_if_idle(engine))
    return engine


def _stamp_return(_dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        record.info[_RETURNED_AT] = time.monotonic()


def _ping_if_idle(engine: Engine) -> Callable[[Any, Any, Any], None]:
    def ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned_at = record.info.get(_RETURNED_AT)
        if returned_at is None or time.monotonic() - returned_at <= PING_AFTER_IDLE_S:
            return  # new (just connected) or used a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as err:  # the pool discards this connection and checks out another
            raise exc.DisconnectionError(f"pooled connection failed its ping: {err}") from err

    return ping_if_idle


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


def make_read_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions for requests that only read (GET): on a server database each statement commits
    by itself, which spares the BEGIN and COMMIT round trips of a transaction.

    Under PostgreSQL's READ COMMITTED each statement of a transaction sees its own snapshot anyway,
    so reads see nothing different. SQLite keeps transactions (they cost no round trip there, and
    its transaction gives the statements of a request one snapshot).
    """
    if engine.dialect.name == "sqlite":
        return make_session_factory(engine)
    return make_session_factory(engine.execution_options(isolation_level="AUTOCOMMIT"))


def ping(engine: Engine) -> None:
    """Raise if the database does not answer."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def pool_usage(engine: Engine) -> str:
    """``"<in use> of <capacity> connections in use"`` for the readiness report."""
    pool: Any = engine.pool
    in_use = pool.checkedout() if hasattr(pool, "checkedout") else 0
    capacity = pool.size() + max(pool._max_overflow, 0) if hasattr(pool, "size") else "?"
    return f"{in_use} of {capacity} connections in use"
