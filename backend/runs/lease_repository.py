"""SQL of a run's lease: claim, fenced renewal, finish, stale-lease recovery. Callers commit.

A claimant owns a run while ``lease_owner`` is its name and ``lease_expires_at`` is in the future.
Every write of an executing run is fenced by ``lease_owner = claimant``: a claimant whose lease was
taken over changes nothing and learns so from the row count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, or_, select, update
from sqlalchemy.orm import Session

from backend.db.models import Run


@dataclass(frozen=True)
class ClaimedRun:
    """What an executor needs of a run, read in the claiming transaction."""

    id: int
    config: dict[str, Any]
    replay_configs: list[dict[str, Any]]
    total_rounds: int
    rounds_done: int
    attempt: int
    cancel_requested: bool


def claim_run(
    session: Session, run_id: int, claimant: str, now: datetime, lease_s: float
) -> ClaimedRun | None:
    """Take a queued run, or a running one whose lease expired; None when someone else holds it."""
    stale = (Run.status == "running") & or_(Run.lease_expires_at.is_(None), Run.lease_expires_at < now)
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, or_(Run.status == "queued", stale))
        .values(
            status="running",
            lease_owner=claimant,
            lease_expires_at=now + timedelta(seconds=lease_s),
            heartbeat_at=now,
            attempt=Run.attempt + 1,
            started_at=case((Run.started_at.is_(None), now), else_=Run.started_at),
            finished_at=None,
            error=None,
        )
        .execution_options(synchronize_session=False)
    )
    if _rowcount(result) == 0:
        return None
    run = session.execute(
        select(Run).where(Run.id == run_id).execution_options(populate_existing=True)
    ).scalar_one()
    return ClaimedRun(
        id=run.id,
        config=run.config,
        replay_configs=list(run.replay_configs or []),
        total_rounds=run.total_rounds,
        rounds_done=run.rounds_done,
        attempt=run.attempt,
        cancel_requested=run.cancel_requested,
    )


def renew_lease(
    session: Session,
    run_id: int,
    claimant: str,
    now: datetime,
    lease_s: float,
    rounds_done: int | None = None,
) -> bool:
    """Extend the lease (and raise ``rounds_done`` to at least the given count); False if not ours."""
    values: dict[str, Any] = {"lease_expires_at": now + timedelta(seconds=lease_s), "heartbeat_at": now}
    if rounds_done is not None:
        values["rounds_done"] = case((Run.rounds_done < rounds_done, rounds_done), else_=Run.rounds_done)
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.lease_owner == claimant, Run.status == "running")
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return _rowcount(result) == 1


def finish_run(
    session: Session, run_id: int, claimant: str, status: str, error: str | None, now: datetime
) -> bool:
    """Set a terminal status and release the lease; False if the lease is no longer ours."""
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.lease_owner == claimant, Run.status == "running")
        .values(
            status=status,
            error=error,
            finished_at=now,
            lease_owner=None,
            lease_expires_at=None,
            cancel_requested=False,
        )
        .execution_options(synchronize_session=False)
    )
    return _rowcount(result) == 1


def is_cancel_requested(session: Session, run_id: int) -> bool:
    return bool(session.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


def requeue_stale_runs(session: Session, now: datetime) -> list[int]:
    """Put running runs whose lease expired back in the queue; returns their ids."""
    stale = session.scalars(
        select(Run.id).where(Run.status == "running", Run.lease_expires_at < now).order_by(Run.id)
    ).all()
    requeued = []
    for run_id in stale:  # one conditional UPDATE each: a claimant renewing meanwhile keeps its run
        result = session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status == "running", Run.lease_expires_at < now)
            .values(status="queued", lease_owner=None, lease_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        if _rowcount(result) == 1:
            requeued.append(run_id)
    return requeued


def fail_if_owned(session: Session, run_id: int, claimant: str, error: str, now: datetime) -> bool:
    """Mark a run failed if ``claimant`` still holds it (its process died without finishing)."""
    return finish_run(session, run_id, claimant, "failed", error, now)


def rounds_done(session: Session, run_id: int) -> int:
    return int(session.scalar(select(Run.rounds_done).where(Run.id == run_id)) or 0)


def total_rounds(session: Session, run_id: int) -> int:
    return int(session.scalar(select(Run.total_rounds).where(Run.id == run_id)) or 0)


def release_to_queue(session: Session, run_id: int, claimant: str) -> bool:
    """Give a run back to the queue (a graceful stop); False if the lease is no longer ours."""
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.lease_owner == claimant, Run.status == "running")
        .values(status="queued", lease_owner=None, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    return _rowcount(result) == 1


def queued_run_ids(session: Session, limit: int) -> list[int]:
    return list(session.scalars(select(Run.id).where(Run.status == "queued").order_by(Run.id).limit(limit)))


def _rowcount(result: Any) -> int:
    return int(result.rowcount)
