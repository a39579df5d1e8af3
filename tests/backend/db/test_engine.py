"""Pooled connections on a server database: pinged only after sitting idle; GET sessions autocommit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from backend.db import engine as engine_module
from backend.db.engine import make_engine, make_read_session_factory, make_session_factory, ping
from tests.backend.databases import sqlite_url


@pytest.fixture
def engine(pg_database: str) -> Iterator[Engine]:
    engine = make_engine(pg_database, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _count_pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    real_ping = engine.dialect.do_ping

    def counting_ping(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real_ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counting_ping)
    return pings


@pytest.mark.postgres
def test_a_connection_used_a_moment_ago_is_not_pinged(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = _count_pings(engine, monkeypatch)
    first = _backend_pid(engine)
    assert _backend_pid(engine) == first  # the same pooled connection, reused at once
    assert pings == []


@pytest.mark.postgres
def test_an_idle_connection_that_died_is_replaced_before_use(
    engine: Engine, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = _count_pings(engine, monkeypatch)
    dead = _backend_pid(engine)
    admin = make_engine(pg_database, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:  # as a database restart or a proxy's idle timeout would
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
    admin.dispose()
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.0)  # it has now been idle long enough

    ping(engine)  # no error: the failed ping made the pool connect afresh

    assert pings  # the idle connection was pinged
    assert _backend_pid(engine) != dead


@pytest.mark.postgres
def test_get_sessions_commit_each_statement_on_a_server_database(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE IF NOT EXISTS stamps (n integer)"))
        connection.execute(text("DELETE FROM stamps"))
    with make_read_session_factory(engine)() as session:
        session.execute(text("INSERT INTO stamps VALUES (1)"))  # e.g. a token's last use
        session.rollback()  # nothing to roll back: the statement committed by itself
    with make_session_factory(engine)() as session:
        assert session.execute(text("SELECT count(*) FROM stamps")).scalar_one() == 1
        session.execute(text("INSERT INTO stamps VALUES (2)"))
        session.rollback()  # the ordinary sessions keep their transactions
        assert session.execute(text("SELECT count(*) FROM stamps")).scalar_one() == 1


@pytest.mark.parametrize("read", [False, True])
def test_sqlite_sessions_keep_their_transactions(tmp_path: Any, read: bool) -> None:
    engine = make_engine(sqlite_url(tmp_path, create_tables=False))
    factory = make_read_session_factory(engine) if read else make_session_factory(engine)
    with factory() as session:
        session.execute(text("CREATE TABLE stamps (n integer)"))
        session.commit()
        session.execute(text("INSERT INTO stamps VALUES (1)"))
        session.rollback()
        assert session.execute(text("SELECT count(*) FROM stamps")).scalar_one() == 0
    engine.dispose()


@pytest.mark.postgres
def test_executor_connections_carry_their_idle_in_transaction_and_lock_timeouts(pg_database: str) -> None:
    """The processes that execute runs: a session frozen inside a transaction is ended by the server,
    and a statement gives up waiting for a lock, on every connection (also after a rollback)."""
    limits = engine_module.SessionLimits(idle_in_transaction_s=15.0, lock_timeout_s=2.5)
    executor = make_engine(pg_database, limits, pool_size=1, max_overflow=0)
    query = text(
        "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('lock_timeout')"
    )
    try:
        with executor.connect() as connection:
            connection.execute(text("SELECT 1"))
            connection.rollback()
        with executor.connect() as connection:
            assert tuple(connection.execute(query).one()) == ("15s", "2500ms")
    finally:
        executor.dispose()
    plain = make_engine(pg_database)
    try:
        with plain.connect() as connection:  # the API's connections keep the server's defaults
            assert tuple(connection.execute(query).one()) == ("0", "0")
    finally:
        plain.dispose()
