"""Engines and session factories. SQLite gets WAL, a busy timeout and enforced foreign keys; on
PostgreSQL the processes that execute runs get ``EXECUTOR_LIMITS`` on every connection."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, text
from sqlalchemy.orm import Session, sessionmaker

SessionFactory = Callable[[], Session]

SQLITE_BUSY_TIMEOUT_MS = 10_000
# a pooled connection idle longer than this is pinged before use (a busy one was just proven alive)
PING_AFTER_IDLE_S = 1.0
_RETURNED_AT = "returned_at"


@dataclass(frozen=True)
class SessionLimits:
    """PostgreSQL limits set on every connection of an engine.

    ``idle_in_transaction_s``: the server ends a session that sits inside a transaction this long
    without sending a statement (a process frozen mid-transaction: SIGSTOP, a debugger, swap), which
    releases every lock it held. ``lock_timeout_s``: a statement that waits this long for a lock fails
    instead of waiting on.
    """

    idle_in_transaction_s: float
    lock_timeout_s: float


# the Celery workers, the local executor's run processes and the reaper: their transactions are a
# few statements in a row, so a longer pause means the process is stuck, and must not keep others
# waiting on the locks it holds (a run's row, a study's row); a frozen holder is ended before a
# waiter gives up, so the lock timeout only bounds waits behind statements that run long
EXECUTOR_LIMITS = SessionLimits(idle_in_transaction_s=15.0, lock_timeout_s=30.0)


def make_engine(database_url: str, limits: SessionLimits | None = None, **kwargs: Any) -> Engine:
    """An engine for ``database_url``; on SQLite every connection runs the PRAGMAs below.

    On a server database a connection that sat idle in the pool for more than ``PING_AFTER_IDLE_S``
    is pinged when checked out, and replaced if the ping fails (the database restarted, a proxy
    dropped it). Unlike ``pool_pre_ping`` this spares a round trip per request under steady load.
    ``limits`` are set on each new connection (PostgreSQL; SQLite has one writer and its busy timeout).
    """
    if database_url.startswith("sqlite"):
        engine = create_engine(database_url, connect_args={"check_same_thread": False}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(database_url, **kwargs)
    event.listen(engine, "checkin", _stamp_return)
    event.listen(engine, "checkout", _ping_if_idle(engine))
    if limits is not None:
        event.listen(engine, "connect", _set_limits(limits))
    return engine


def _set_limits(limits: SessionLimits) -> Callable[[Any, Any], None]:
    def set_limits(dbapi_connection: Any, _record: Any) -> None:
        idle_ms, lock_ms = round(limits.idle_in_transaction_s * 1000), round(limits.lock_timeout_s * 1000)
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {idle_ms}")
            cursor.execute(f"SET lock_timeout = {lock_ms}")
        dbapi_connection.commit()  # a SET inside a transaction that rolls back would be undone

    return set_limits


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
