"""Store conformance of the lease SQL (claim, fencing, finish, recovery) on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.db.models import Run
from backend.runs import lease_repository as leases
from tests.backend.builders import tiny_config


def _queued_run(factory: sessionmaker[Session], status: str = "queued") -> int:
    with factory() as session:
        run = Run(
            name="r",
            config=tiny_config(),
            status=status,
            total_rounds=5,
            policy="uniform",
            executor="analytic",
        )
        session.add(run)
        session.commit()
        return run.id


def _claim(
    factory: sessionmaker[Session], run_id: int, claimant: str, lease_s: float = 30.0
) -> leases.ClaimedRun | None:
    with factory() as session:
        claimed = leases.claim_run(session, run_id, claimant, utcnow(), lease_s)
        session.commit()
        return claimed


def test_a_queued_run_is_claimed_once(session_factory: sessionmaker[Session]) -> None:
    run_id = _queued_run(session_factory)
    first = _claim(session_factory, run_id, "a")
    assert first is not None and first.attempt == 1 and first.total_rounds == 5
    assert _claim(session_factory, run_id, "b") is None  # a live lease is not taken over
    with session_factory() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.status == "running" and run.lease_owner == "a"
        assert run.started_at is not None and run.lease_expires_at is not None


def test_an_expired_lease_is_taken_over_and_the_old_claimant_is_fenced(
    session_factory: sessionmaker[Session],
) -> None:
    run_id = _queued_run(session_factory)
    assert _claim(session_factory, run_id, "a", lease_s=-1.0) is not None  # already expired
    taken = _claim(session_factory, run_id, "b")
    assert taken is not None and taken.attempt == 2
    with session_factory() as session:
        assert not leases.renew_lease(session, run_id, "a", utcnow(), 30.0, rounds_done=3)
        assert not leases.finish_run(session, run_id, "a", "succeeded", None, utcnow())
        assert leases.renew_lease(session, run_id, "b", utcnow(), 30.0, rounds_done=2)
        session.commit()
        run = session.get(Run, run_id)
        assert run is not None and run.rounds_done == 2 and run.status == "running"


def test_rounds_done_never_goes_back(session_factory: sessionmaker[Session]) -> None:
    run_id = _queued_run(session_factory)
    _claim(session_factory, run_id, "a")
    with session_factory() as session:
        assert leases.renew_lease(session, run_id, "a", utcnow(), 30.0, rounds_done=4)
        assert leases.renew_lease(session, run_id, "a", utcnow(), 30.0, rounds_done=2)  # a re-run round
        session.commit()
        assert leases.rounds_done(session, run_id) == 4


def test_finish_releases_the_lease(session_factory: sessionmaker[Session]) -> None:
    run_id = _queued_run(session_factory)
    _claim(session_factory, run_id, "a")
    with session_factory() as session:
        assert leases.finish_run(session, run_id, "a", "failed", "boom", utcnow())
        session.commit()
        run = session.get(Run, run_id)
        assert run is not None
        assert (run.status, run.error, run.lease_owner, run.finished_at is not None) == (
            "failed",
            "boom",
            None,
            True,
        )
    assert _claim(session_factory, run_id, "b") is None  # finished runs are not claimable


def test_only_stale_running_runs_are_requeued(session_factory: sessionmaker[Session]) -> None:
    stale, live, queued = (_queued_run(session_factory) for _ in range(3))
    _claim(session_factory, stale, "a", lease_s=-1.0)
    _claim(session_factory, live, "b")
    with session_factory() as session:
        assert leases.requeue_stale_runs(session, utcnow()) == [stale]
        session.commit()
        assert leases.queued_run_ids(session, 10) == [stale, queued]
        assert leases.requeue_stale_runs(session, utcnow() + timedelta(hours=1)) == [live]


def test_release_to_queue_is_fenced(session_factory: sessionmaker[Session]) -> None:
    run_id = _queued_run(session_factory)
    _claim(session_factory, run_id, "a")
    with session_factory() as session:
        assert not leases.release_to_queue(session, run_id, "someone-else")
        assert leases.release_to_queue(session, run_id, "a")
        session.commit()
        assert leases.queued_run_ids(session, 10) == [run_id]
