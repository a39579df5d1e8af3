"""``run_and_commit``: an endpoint's work and the end of its transaction in one worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from backend.db.engine import make_engine, make_session_factory
from backend.db.transaction import after_commit
from backend.deps import run_and_commit
from tests.backend.databases import sqlite_url


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(sqlite_url(tmp_path, create_tables=False))
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE notes (body text)"))
    yield make_session_factory(engine)
    engine.dispose()


def _count(session: Session) -> int:
    return int(session.execute(text("SELECT count(*) FROM notes")).scalar_one())


def _note_work(session: Session, threads: list[str], error: Exception | None) -> Callable[[], str]:
    """Work that stores a note and schedules an after-commit action; both record their thread."""

    def work() -> str:
        threads.append(threading.current_thread().name)
        session.execute(text("INSERT INTO notes VALUES ('a note')"))
        after_commit(session, lambda: threads.append(threading.current_thread().name))
        if error is not None:
            raise error
        return "done"

    return work


def test_the_work_is_committed_and_after_commit_actions_run_in_the_same_thread(
    factory: sessionmaker[Session],
) -> None:
    threads: list[str] = []
    session = factory()

    assert anyio.run(run_and_commit, session, _note_work(session, threads, None)) == "done"

    assert len(threads) == 2 and threads[0] == threads[1] != threading.current_thread().name
    with factory() as other:
        assert _count(other) == 1


def test_failed_work_is_discarded_and_its_error_raised(factory: sessionmaker[Session]) -> None:
    threads: list[str] = []
    session = factory()

    with pytest.raises(LookupError, match="no such run"):
        anyio.run(run_and_commit, session, _note_work(session, threads, LookupError("no such run")))

    assert len(threads) == 1  # the work ran; its after-commit action did not
    with factory() as other:
        assert _count(other) == 0
