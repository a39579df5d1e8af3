"""A run rides out a database outage: its writes wait and are tried again, and the run goes on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import Run
from backend.live.channel import LiveEvent
from backend.runtime import outage
from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from backend.runtime.outage import through_outage
from tests.backend.builders import event_summary, insert_run, service_workspace, stored_records

Factory = sessionmaker[Session]


def _unavailable() -> OperationalError:
    return OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between attempts, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(outage, "_sleep", waits.append)
    return waits


def test_an_operation_is_tried_again_while_the_database_is_unavailable(_no_waiting: list[float]) -> None:
    failures = [_unavailable(), _unavailable(), _unavailable()]

    def operation() -> str:
        if failures:
            raise failures.pop()
        return "done"

    assert through_outage(operation, "test") == "done"
    assert _no_waiting == [0.5, 1.0, 2.0]


def test_other_errors_and_a_long_outage_are_raised() -> None:
    def wrong() -> None:
        raise IntegrityError("INSERT", {}, ValueError("duplicate key"))

    with pytest.raises(IntegrityError):
        through_outage(wrong, "test")

    def down() -> None:
        raise _unavailable()

    with pytest.raises(OperationalError):
        through_outage(down, "test", tolerance_s=0.0)


class FlakyDatabase:
    """A session factory through which the database becomes unavailable on demand: the next
    ``failures`` sessions fail as a refused connection does."""

    def __init__(self, factory: Factory) -> None:
        self.factory = factory
        self.failures = 0
        self.failed = 0

    def __call__(self) -> Session:
        if self.failures > 0:
            self.failures -= 1
            self.failed += 1
            raise _unavailable()
        return self.factory()


class OutageAfterRound:
    """Takes the database away for ``failures`` sessions once round ``index`` is committed."""

    def __init__(self, database: FlakyDatabase, index: int, failures: int) -> None:
        self.database, self.index, self.failures = database, index, failures

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        if key == self.index:
            self.database.failures = self.failures


def test_a_run_goes_on_after_the_database_comes_back(session_factory: Factory, tmp_path: Path) -> None:
    reference = insert_run(session_factory)
    run_id = insert_run(session_factory)
    store: Any = RunStore(session_factory)
    assert _execute(run_id=reference, store=store, tmp_path=tmp_path) == "succeeded"
    database = FlakyDatabase(session_factory)
    store = RunStore(database, OutageAfterRound(database, index=1, failures=8))
    assert _execute(run_id=run_id, store=store, tmp_path=tmp_path) == "succeeded"
    assert database.failed == 8  # the outage happened, in the middle of the run
    with session_factory() as session:
        run = session.get(Run, run_id)
        assert run is not None and (run.status, run.attempt, run.error) == ("succeeded", 1, None)
    assert stored_records(session_factory, run_id) == stored_records(session_factory, reference)
    assert [r for kind, r in event_summary(session_factory, run_id) if kind == "round"] == list(range(5))


def _execute(run_id: int, store: Any, tmp_path: Path) -> str:
    return execute_run(
        run_id,
        store,
        claimant=f"worker-{run_id}",
        artifact_dir=tmp_path / "artifacts",
        workspace=service_workspace(tmp_path / "data"),
        lease_s=30.0,
    )
