"""SQL of the run lifecycle: the only code that writes the runs table's status and lease columns and
the outbox (``run_events``). Callers (backend.runtime.lifecycle) commit.

Every write of an executing run is fenced by its lease token: ``lease_owner = token`` and status
``running``. A token is unique per claim (the claimant's name carries a random part), so a claimant
whose lease was taken over changes nothing and learns so from the row count.

Outbox order: event ids are SSE event ids, so a reader that has seen id N must never later find a
smaller id committed. On PostgreSQL ``append_events`` takes a short exclusive lock on run_events
(compatible with readers' SELECTs) and every transition appends its events as its last statement,
so ids commit in order and a lock holder never waits for anything but its commit. SQLite serialises
writers anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, or_, select, text, update
from sqlalchemy.orm import Session

from backend.db.models import Run, RunEvent

# what a status event reports, read back from the row an UPDATE changed (RETURNING)
STATUS_COLUMNS = (Run.id, Run.status, Run.rounds_done, Run.total_rounds, Run.error)


@dataclass(frozen=True)
class StatusRow:
    run_id: int
    status: str
    rounds_done: int
    total_rounds: int
    error: str | None

    def payload(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "rounds_done": self.rounds_done,
            "total_rounds": self.total_rounds,
            "error": self.error,
        }


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


def _status_update(
    session: Session, run_id: int, conditions: Sequence[Any], **values: Any
) -> StatusRow | None:
    """A conditional UPDATE of one run; its status row when it changed the row, else None."""
    row = session.execute(
        update(Run)
        .where(Run.id == run_id, *conditions)
        .values(**values)
        .returning(*STATUS_COLUMNS)
        .execution_options(synchronize_session=False)
    ).first()
    return None if row is None else StatusRow(*row)


def _fenced(token: str) -> list[Any]:
    return [Run.lease_owner == token, Run.status == "running"]


def append_events(session: Session, events: Sequence[tuple[int, str, dict[str, Any]]]) -> list[int]:
    """Append (run_id, kind, data) events to the outbox; their ids. Must be a transaction's last write."""
    if not events:
        return []
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("LOCK TABLE run_events IN EXCLUSIVE MODE"))
    rows = [RunEvent(run_id=run_id, kind=kind, data=data) for run_id, kind, data in events]
    session.add_all(rows)
    session.flush()
    return [row.id for row in rows]


# -- API side -------------------------------------------------------------------------------------


def insert_run(session: Session, run: Run) -> StatusRow:
    run.status = "queued"
    session.add(run)
    session.flush()
    return StatusRow(run.id, run.status, run.rounds_done or 0, run.total_rounds, run.error)


def cancel_queued(session: Session, run_id: int, now: datetime) -> StatusRow | None:
    return _status_update(session, run_id, [Run.status == "queued"], status="cancelled", finished_at=now)


def request_cancel(session: Session, run_id: int) -> bool:
    """Flag a running run so its executor stops after the current round (no status change)."""
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.status == "running")
        .values(cancel_requested=True)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def requeue_finished(session: Session, run_id: int) -> StatusRow | None:
    """A failed or cancelled run back to the queue."""
    return _status_update(
        session,
        run_id,
        [Run.status.in_(("failed", "cancelled"))],
        status="queued",
        error=None,
        cancel_requested=False,
        finished_at=None,
    )


def delete_unless_active(session: Session, run_id: int) -> str | None:
    """Delete a run that is neither queued nor running; None when deleted, else its status."""
    status: str | None = session.scalar(select(Run.status).where(Run.id == run_id).with_for_update())
    if status is None or status in ("queued", "running"):
        return status
    run = session.get(Run, run_id)
    session.delete(run)
    session.flush()
    return None


# -- executor side --------------------------------------------------------------------------------


def claim(session: Session, run_id: int, token: str, now: datetime, lease_s: float) -> StatusRow | None:
    """Take a queued run, or a running one whose lease expired; None when someone else holds it."""
    stale = (Run.status == "running") & or_(Run.lease_expires_at.is_(None), Run.lease_expires_at < now)
    return _status_update(
        session,
        run_id,
        [or_(Run.status == "queued", stale)],
        status="running",
        lease_owner=token,
        lease_expires_at=now + timedelta(seconds=lease_s),
        heartbeat_at=now,
        attempt=Run.attempt + 1,
        started_at=case((Run.started_at.is_(None), now), else_=Run.started_at),
        finished_at=None,
        error=None,
    )


def claimed_run(session: Session, run_id: int) -> ClaimedRun:
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


def renew(
    session: Session, run_id: int, token: str, now: datetime, lease_s: float, rounds_done: int | None = None
) -> bool:
    """Extend the lease (and raise ``rounds_done`` to at least the given count); False if not ours."""
    values: dict[str, Any] = {"lease_expires_at": now + timedelta(seconds=lease_s), "heartbeat_at": now}
    if rounds_done is not None:
        values["rounds_done"] = case((Run.rounds_done < rounds_done, rounds_done), else_=Run.rounds_done)
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, *_fenced(token))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def finish(
    session: Session, run_id: int, token: str, status: str, error: str | None, now: datetime
) -> StatusRow | None:
    """A terminal status, the lease released; None if the lease is no longer ``token``'s."""
    return _status_update(
        session,
        run_id,
        _fenced(token),
        status=status,
        error=error,
        finished_at=now,
        lease_owner=None,
        lease_expires_at=None,
        cancel_requested=False,
    )


def release(session: Session, run_id: int, token: str) -> StatusRow | None:
    """Back to the queue (a graceful stop); None if the lease is no longer ``token``'s."""
    return _status_update(
        session, run_id, _fenced(token), status="queued", lease_owner=None, lease_expires_at=None
    )


def stale_run_ids(session: Session, now: datetime) -> list[int]:
    return list(
        session.scalars(
            select(Run.id).where(Run.status == "running", Run.lease_expires_at < now).order_by(Run.id)
        )
    )


def requeue_if_stale(session: Session, run_id: int, now: datetime) -> StatusRow | None:
    """Running with an expired lease → queued (a claimant renewing meanwhile keeps its run)."""
    return _status_update(
        session,
        run_id,
        [Run.status == "running", Run.lease_expires_at < now],
        status="queued",
        lease_owner=None,
        lease_expires_at=None,
    )


# -- reads ----------------------------------------------------------------------------------------


def is_cancel_requested(session: Session, run_id: int) -> bool:
    return bool(session.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


def queued_run_ids(session: Session, limit: int) -> list[int]:
    return list(session.scalars(select(Run.id).where(Run.status == "queued").order_by(Run.id).limit(limit)))


def attempt_of(session: Session, run_id: int) -> int | None:
    attempt: int | None = session.scalar(select(Run.attempt).where(Run.id == run_id))
    return attempt


def latest_event_id(session: Session) -> int:
    return int(session.scalar(select(func.max(RunEvent.id))) or 0)
