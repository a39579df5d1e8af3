"""The study transitions of the run lifecycle, on SQLite and PostgreSQL: at most ``concurrency`` runs
of a study are claimed at once (concurrent claims included), the queue names the runs that may
start, and the Celery hand-over sends the deferred runs when a slot frees."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import Run, Study
from backend.live.channel import STATUS, LiveEvent
from backend.runtime import lifecycle
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.lifecycle import Deferred, Lease, RunStore
from tests.backend.builders import event_summary, insert_run

Factory = sessionmaker[Session]


class Wakes:
    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        pass


def _study(factory: Factory, concurrency: int, runs: int) -> tuple[int, list[int]]:
    with factory() as session:
        study = Study(name="s", definition={}, cells=[], concurrency=concurrency)
        session.add(study)
        session.commit()
        study_id = study.id
    return study_id, [insert_run(factory, study_id=study_id, study_cell=i) for i in range(runs)]


def _lease(claimed: Any) -> Lease:
    assert isinstance(claimed, tuple), claimed
    lease: Lease = claimed[0]
    return lease


def test_a_study_runs_at_most_concurrency_runs_and_the_queue_names_the_next(session_factory: Factory) -> None:
    store = RunStore(session_factory)
    study_id, (a, b, c, d) = _study(session_factory, concurrency=2, runs=4)
    other = insert_run(session_factory)
    assert lifecycle.startable_run_ids(store, 10) == [a, b, other]
    first, second = _lease(lifecycle.claim(store, a, "a", 30.0)), _lease(lifecycle.claim(store, b, "b", 30.0))
    assert lifecycle.claim(store, c, "c", 30.0) == Deferred(study_id)
    assert lifecycle.startable_run_ids(store, 10) == [other]  # c and d wait, queued
    assert lifecycle.startable_run_ids(store, 10, study_id=study_id) == []
    assert lifecycle.finish(store, first, "succeeded", None)
    assert lifecycle.startable_run_ids(store, 10, study_id=study_id) == [c]
    assert lifecycle.claim(store, c, "c", 30.0) is not None
    assert lifecycle.claim(store, d, "d", 30.0) == Deferred(study_id)
    assert lifecycle.claim(store, b, "x", 30.0) is None  # held by its claimant: not a deferral
    assert lifecycle.finish(store, second, "failed", "boom")
    assert lifecycle.startable_run_ids(store, 10, study_id=study_id) == [d]
    assert event_summary(session_factory, d) == []  # a deferral writes nothing


def test_an_expired_lease_in_a_full_study_is_taken_over(session_factory: Factory) -> None:
    store = RunStore(session_factory)
    _, (a, _b) = _study(session_factory, concurrency=1, runs=2)
    assert lifecycle.claim(store, a, "gone", 30.0)
    with session_factory() as session:
        session.execute(update(Run).where(Run.id == a).values(lease_expires_at=Run.created_at))
        session.commit()
    assert isinstance(lifecycle.claim(store, a, "next", 30.0), tuple)  # its own slot


def test_concurrent_claims_of_one_study_pass_their_slot_check_one_at_a_time(session_factory: Factory) -> None:
    store = RunStore(session_factory)
    _, runs = _study(session_factory, concurrency=2, runs=6)
    barrier = threading.Barrier(len(runs))
    outcomes: dict[int, Any] = {}

    def claim(run_id: int) -> None:
        barrier.wait()
        outcomes[run_id] = lifecycle.claim(store, run_id, f"c{run_id}", 30.0)

    threads = [threading.Thread(target=claim, args=(r,)) for r in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(isinstance(o, tuple) for o in outcomes.values()) == 2
    assert sum(isinstance(o, Deferred) for o in outcomes.values()) == 4
    with session_factory() as session:
        running = session.scalars(select(Run.id).where(Run.status == "running")).all()
    assert len(running) == 2


def test_cancel_and_resume_of_a_study_change_every_run_with_its_event(session_factory: Factory) -> None:
    store = RunStore(session_factory)
    study_id, (a, b, c) = _study(session_factory, concurrency=1, runs=3)
    lease = _lease(lifecycle.claim(store, a, "a", 30.0))
    with session_factory() as session:
        assert lifecycle.cancel_study(session, study_id, Wakes()) == (2, 1)
        session.commit()
    assert [event_summary(session_factory, r)[-1] for r in (b, c)] == [(STATUS, "cancelled")] * 2
    assert lifecycle.is_cancel_requested(store, a)
    assert lifecycle.finish(store, lease, "cancelled", None)
    with session_factory() as session:
        assert lifecycle.resume_study(session, study_id, Wakes()) == [a, b, c]
        session.commit()
    assert [event_summary(session_factory, r)[-1] for r in (a, b, c)] == [(STATUS, "queued")] * 3
    assert lifecycle.startable_run_ids(store, 10, study_id=study_id) == [a]


class _Ledger:
    def __init__(self, marked: set[int]) -> None:
        self.marked = marked

    def unmarked(self, run_ids: list[int]) -> list[int]:
        return [r for r in run_ids if r not in self.marked]


@pytest.mark.deployments("embedded")
def test_a_freed_slot_sends_the_deferred_runs_that_have_no_message(
    session_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever of the finisher and the deferred run looks last sees both the free slot and the
    cleared mark, and sends the run; a study still full sends nothing."""
    store = RunStore(session_factory)
    study_id, (a, b, c) = _study(session_factory, concurrency=1, runs=3)
    ledger = _Ledger(marked=set())
    executor = CeleryRunExecutor(None, session_factory, ledger, "q", None)  # type: ignore[arg-type]
    sent: list[int] = []
    monkeypatch.setattr(executor, "enqueue", sent.append)
    lease = _lease(lifecycle.claim(store, a, "a", 30.0))
    assert lifecycle.claim(store, b, "b", 30.0) == Deferred(study_id)
    assert executor.start_deferred(b, "deferred") == []  # the study is still full
    assert lifecycle.finish(store, lease, "succeeded", None)
    ledger.marked = {b}  # b's deferred task has not cleared its mark yet: it will look itself
    assert executor.start_deferred(a, "succeeded") == []
    ledger.marked = set()
    assert executor.start_deferred(b, "deferred") == [b] and sent == [b]
    assert executor.start_deferred(a, "skipped") == []  # an outcome that frees nothing
    assert executor.start_deferred(insert_run(session_factory), "succeeded") == []  # not a study's run
    assert c not in sent
