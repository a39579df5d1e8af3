"""SQL of the run lifecycle: the only code that writes the runs table's status and lease columns and
the outbox (``run_events``). Callers (backend.runtime.lifecycle) commit.

Every write of an executing run is fenced by its lease token: ``lease_owner = token`` and status
``running``. A token is unique per claim (the claimant's name carries a random part), so a claimant
whose lease was taken over changes nothing and learns so from the row count.

Outbox order: an event's SSE id is its ``position``, which the database gives it when its
transaction commits, in commit order (``backend.db.models.OUTBOX_ORDER``): a reader that has seen
position N never later finds a smaller one committed, and no writer waits for another's transaction
(only, on PostgreSQL, for another's COMMIT to finish). ``append_events`` returns the rows' ids;
``event_positions`` reads their positions once committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from backend.db.models import RoundMetric, Run, RunEvent, Study

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
    checkpoint: str | None  # the file name of the run's current checkpoint (backend.runtime.checkpoints)


def _status_updates(session: Session, conditions: Sequence[Any], **values: Any) -> list[StatusRow]:
    """A conditional UPDATE of runs; the status rows of the runs it changed, by run id."""
    rows = session.execute(
        update(Run)
        .where(*conditions)
        .values(**values)
        .returning(*STATUS_COLUMNS)
        .execution_options(synchronize_session=False)
    ).all()
    return sorted((StatusRow(*row) for row in rows), key=lambda row: row.run_id)


def _status_update(
    session: Session, run_id: int, conditions: Sequence[Any], **values: Any
) -> StatusRow | None:
    """A conditional UPDATE of one run; its status row when it changed the row, else None."""
    rows = _status_updates(session, [Run.id == run_id, *conditions], **values)
    return rows[0] if rows else None


def _flag_cancel(session: Session, condition: Any) -> int:
    """Flag running runs to stop after their current round (no status change); how many."""
    result = session.execute(
        update(Run)
        .where(condition, Run.status == "running")
        .values(cancel_requested=True)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# what a failed or cancelled run gets when it goes back to the queue
REQUEUED: dict[str, Any] = {"status": "queued", "error": None, "cancel_requested": False, "finished_at": None}


def _fenced(token: str) -> list[Any]:
    return [Run.lease_owner == token, Run.status == "running"]


def append_events(session: Session, events: Sequence[tuple[int, str, dict[str, Any]]]) -> list[int]:
    """Append (run_id, kind, data) events to the outbox; their row ids (not their positions: those
    are given at the commit)."""
    if not events:
        return []
    rows = [RunEvent(run_id=run_id, kind=kind, data=data) for run_id, kind, data in events]
    session.add_all(rows)
    session.flush()
    return [row.id for row in rows]


def event_positions(session: Session, row_ids: Sequence[int]) -> dict[int, int]:
    """Row id → position of committed events (an event not committed, or deleted since, is missing)."""
    if not row_ids:
        return {}
    query = select(RunEvent.id, RunEvent.position).where(
        RunEvent.id.in_(row_ids), RunEvent.position.is_not(None)
    )
    return {row_id: position for row_id, position in session.execute(query) if position is not None}


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
    return _flag_cancel(session, Run.id == run_id) == 1


def requeue_finished(session: Session, run_id: int) -> StatusRow | None:
    """A failed or cancelled run back to the queue."""
    return _status_update(session, run_id, [Run.status.in_(("failed", "cancelled"))], **REQUEUED)


def delete_unless_active(session: Session, run_id: int) -> str | None:
    """Delete a run that is neither queued nor running; None when deleted, else its status."""
    status: str | None = session.scalar(select(Run.status).where(Run.id == run_id).with_for_update())
    if status is None or status in ("queued", "running"):
        return status
    run = session.get(Run, run_id)
    session.delete(run)
    session.flush()
    return None


def insert_study(session: Session, study: Study, runs: Sequence[Run]) -> list[StatusRow]:
    """Store a study and its runs, queued."""
    session.add(study)
    session.flush()
    for run in runs:
        run.study_id = study.id
    return [insert_run(session, run) for run in runs]


def cancel_queued_of_study(session: Session, study_id: int, now: datetime) -> list[StatusRow]:
    conditions = [Run.study_id == study_id, Run.status == "queued"]
    return _status_updates(session, conditions, status="cancelled", finished_at=now)


def request_cancel_of_study(session: Session, study_id: int) -> int:
    """Flag the study's running runs to stop after their current round; how many were flagged."""
    return _flag_cancel(session, Run.study_id == study_id)


def requeue_finished_of_study(session: Session, study_id: int) -> list[StatusRow]:
    """The study's failed and cancelled runs back to the queue."""
    conditions = [Run.study_id == study_id, Run.status.in_(("failed", "cancelled"))]
    return _status_updates(session, conditions, **REQUEUED)


# -- executor side --------------------------------------------------------------------------------


def lock_study_of(session: Session, run_id: int) -> int | None:
    """The study of run ``run_id`` (None: not a study's run), its row locked until the transaction
    ends on PostgreSQL, so the claims of one study's runs pass their slot check one at a time."""
    study_id: int | None = session.scalar(
        select(Study.id).join(Run, Run.study_id == Study.id).where(Run.id == run_id).with_for_update(of=Study)
    )
    return study_id


def is_claimable(session: Session, run_id: int, now: datetime) -> bool:
    """Queued, or running under an expired lease (whether or not its study has a free slot)."""
    return session.scalar(select(Run.id).where(Run.id == run_id, _claimable(now))) is not None


def _claimable(now: datetime) -> ColumnElement[bool]:
    stale = (Run.status == "running") & or_(Run.lease_expires_at.is_(None), Run.lease_expires_at < now)
    return or_(Run.status == "queued", stale)


def _study_has_a_free_slot(study_id: int, run_id: int) -> ColumnElement[bool]:
    """Fewer of the study's other runs are running than its concurrency allows."""
    other = aliased(Run)
    running = (
        select(func.count())
        .select_from(other)
        .where(other.study_id == study_id, other.status == "running", other.id != run_id)
        .scalar_subquery()
    )
    limit = select(Study.concurrency).where(Study.id == study_id).scalar_subquery()
    return running < limit


def claim(
    session: Session, run_id: int, token: str, now: datetime, lease_s: float, study_id: int | None = None
) -> StatusRow | None:
    """Take a queued run, or a running one whose lease expired; None when someone else holds it or,
    for a run of study ``study_id``, when the study already runs as many runs as it may (one
    statement: atomic on SQLite; on PostgreSQL the caller holds the study's row lock)."""
    conditions = [_claimable(now)]
    if study_id is not None:
        conditions.append(_study_has_a_free_slot(study_id, run_id))
    return _status_update(
        session,
        run_id,
        conditions,
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
        checkpoint=run.checkpoint,
    )


def renew(
    session: Session,
    run_id: int,
    token: str,
    now: datetime,
    lease_s: float,
    rounds_done: int | None = None,
    checkpoint: str | None = None,
) -> bool:
    """Extend the lease (and raise ``rounds_done`` to at least the given count, or name the run's
    current checkpoint file); False if not ours."""
    values: dict[str, Any] = {"lease_expires_at": now + timedelta(seconds=lease_s), "heartbeat_at": now}
    if rounds_done is not None:
        values["rounds_done"] = case((Run.rounds_done < rounds_done, rounds_done), else_=Run.rounds_done)
    if checkpoint is not None:
        values["checkpoint"] = checkpoint
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, *_fenced(token))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def _eval_metric(name: str) -> Any:
    """A stored round's ``eval_metrics[name]`` as a float (NULL when its record has none)."""
    return RoundMetric.record[("eval_metrics", name)].as_float()


def copy_latest_figures(session: Session, run_id: int, round_index: int) -> None:
    """Copy the stored round ``round_index`` to its run's listing columns: its index and latency when
    it is the run's latest round (``rounds_done - 1``), its index, eval loss, perplexity and accuracy
    when it is evaluated and later than the run's latest evaluated round so far.

    Read from the stored row (a round stored again keeps its first record), so the columns hold what
    the stored rounds say; every SET sees the run's row as it was before this statement."""
    stored = RoundMetric
    latest = Run.rounds_done == round_index + 1
    later_eval = and_(
        stored.eval_loss.is_not(None),
        or_(Run.latest_eval_round.is_(None), Run.latest_eval_round < round_index),
    )
    statement = (
        update(Run)
        .where(Run.id == run_id, stored.run_id == Run.id, stored.round == round_index)
        .values(
            latest_round=case((latest, stored.round), else_=Run.latest_round),
            latest_latency_s=case((latest, stored.latency_s), else_=Run.latest_latency_s),
            latest_eval_round=case((later_eval, stored.round), else_=Run.latest_eval_round),
            latest_eval_loss=case((later_eval, stored.eval_loss), else_=Run.latest_eval_loss),
            latest_eval_perplexity=case(
                (later_eval, _eval_metric("eval_perplexity")), else_=Run.latest_eval_perplexity
            ),
            latest_eval_accuracy=case(
                (later_eval, _eval_metric("eval_accuracy")), else_=Run.latest_eval_accuracy
            ),
        )
        .execution_options(synchronize_session=False)
    )
    session.execute(statement)


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


def startable_run_ids(session: Session, limit: int, study_id: int | None = None) -> list[int]:
    """Queued runs, oldest first, that may start now: a run outside studies, or one of the first
    (concurrency − running) queued runs of its study. Only ``study_id``'s runs when given."""
    running = (
        select(Run.study_id, func.count().label("running"))
        .where(Run.status == "running", Run.study_id.is_not(None))
        .group_by(Run.study_id)
        .subquery()
    )
    queued = select(
        Run.id,
        Run.study_id,
        func.row_number().over(partition_by=Run.study_id, order_by=Run.id).label("place"),
    ).where(Run.status == "queued")
    if study_id is not None:
        queued = queued.where(Run.study_id == study_id)
    ranked = queued.subquery()
    free = Study.concurrency - func.coalesce(running.c.running, 0)
    query = (
        select(ranked.c.id)
        .outerjoin(Study, Study.id == ranked.c.study_id)
        .outerjoin(running, running.c.study_id == ranked.c.study_id)
        .where(or_(ranked.c.study_id.is_(None), ranked.c.place <= free))
        .order_by(ranked.c.id)
        .limit(limit)
    )
    return list(session.scalars(query))


def study_of(session: Session, run_id: int) -> int | None:
    study_id: int | None = session.scalar(select(Run.study_id).where(Run.id == run_id))
    return study_id


def attempt_of(session: Session, run_id: int) -> int | None:
    attempt: int | None = session.scalar(select(Run.attempt).where(Run.id == run_id))
    return attempt
