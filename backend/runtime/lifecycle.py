"""Every transition of a run, each one function and one transaction that also writes its live events.

    create ──► queued ──claim──► running ──finish──► succeeded | failed | cancelled
                 ▲  └─cancel──► cancelled   │  ▲ renew, record_round (fenced by the lease token)
                 │                          │  record_checkpoint (fenced: names the checkpoint file)
                 ├──── requeue_stale ◄──────┤ (the lease expired: the claimant is gone)
                 ├──── release ◄────────────┤ (graceful stop of the local executor)
                 └──── resume ◄── failed | cancelled        fail_orphan: running ──► failed

A transition writes the state it changes and the live event that reports it (a ``status`` event, or
a ``round`` event for a newly recorded round) in the same transaction: the outbox (``run_events``)
is the live stream, so a reader resuming after an event id gets every later event exactly once,
whatever process died when. After the commit, readers are woken (``backend.runtime.wake``).

Studies (backend.studies) run many runs at most ``concurrency`` at a time: ``claim`` of a study's run
locks the study's row and refuses (``Deferred``) while that many of its runs are running; the run
stays queued, and ``startable_run_ids`` names the queued runs that may start now (the executors'
queue: the local dispatcher's tick, the Celery worker that finished a run, the reaper).
``create_study``, ``cancel_study`` and ``resume_study`` are the study-wide transitions.

API-side transitions (``create``, ``cancel``, ``resume``, ``delete``) run in the request's session,
which commits them (``backend.db.transaction.commit_and_notify``); executor-side ones open their own
session through a ``RunStore``. Executors hold a ``Lease``: every write of an executing run is fenced
by its token, so a claimant that lost its lease writes nothing (``LeaseLost``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.engine import SessionFactory
from backend.db.models import Run, Study
from backend.db.transaction import after_commit
from backend.jsonsafe import sanitize
from backend.live.channel import ROUND, STATUS, LiveEvent
from backend.metrics.ingest_repository import insert_round
from backend.runtime import repository as repo
from backend.runtime.repository import ClaimedRun, StatusRow
from backend.runtime.wake import NoWake, Wake
from collapipe_core.faults import crash_point
from collapipe_core.records import RoundResult

__all__ = ["ClaimedRun", "Deferred", "Lease", "LeaseLost", "RunStore", "StatusRow"]

log = logging.getLogger(__name__)


class LeaseLost(RuntimeError):
    """Another claimant took this run over (our lease expired); stop without writing."""


@dataclass(frozen=True)
class RunStore:
    """Where executor-side transitions commit, and whom they wake afterwards."""

    session_factory: SessionFactory
    wake: Wake = field(default_factory=NoWake)


@dataclass(frozen=True)
class Lease:
    """A claim on a running run: ``token`` fences every write (unique per claim)."""

    run_id: int
    token: str
    lease_s: float


@dataclass(frozen=True)
class Deferred:
    """``claim``'s answer for a queued run of a study that already runs ``concurrency`` runs: the run
    stays queued until a slot frees (``startable_run_ids`` names it then)."""

    study_id: int


@dataclass(frozen=True)
class _Appended:
    """Events appended in a transaction, by row id; their positions (SSE ids) exist once it commits."""

    row_ids: list[int]
    events: list[tuple[int, str, dict[str, Any]]]

    def published(self, session: Session) -> list[LiveEvent]:
        """The committed events with their positions, for the wake-up (read with ``session`` after
        the commit); none when they cannot be read (the readers then read the table)."""
        if not self.row_ids:
            return []
        try:
            positions = repo.event_positions(session, self.row_ids)
        except SQLAlchemyError:
            log.warning("live events: positions of committed events not read; readers read them later")
            return []
        return [
            LiveEvent(str(positions[row_id]), run_id, kind, data)
            for row_id, (run_id, kind, data) in zip(self.row_ids, self.events, strict=True)
            if row_id in positions
        ]


def _append(session: Session, events: list[tuple[int, str, dict[str, Any]]]) -> _Appended:
    """Append (run_id, kind, data) events to the outbox in the session's transaction."""
    return _Appended(repo.append_events(session, events), events)


def _append_status(session: Session, rows: list[StatusRow]) -> _Appended:
    return _append(session, [(row.run_id, STATUS, row.payload()) for row in rows])


def _wake_after_commit(session: Session, wake: Wake, key: object, appended: _Appended) -> None:
    """After the caller's session commits, wake the readers with the committed events."""
    after_commit(session, lambda: wake.notify(key, appended.published(session)))


def _commit(store: RunStore, session: Session, rows: list[StatusRow]) -> None:
    """Append the status events of ``rows``, commit, wake the readers."""
    appended = _append_status(session, rows)
    for row in rows:
        crash_point("status-change", row.status)
    session.commit()
    if rows:
        store.wake.notify(rows[-1].status, appended.published(session))


# -- API side: the caller's session commits --------------------------------------------------------


def create(session: Session, run: Run, wake: Wake) -> Run:
    """A new run, queued (creation, a fork)."""
    row = repo.insert_run(session, run)
    _wake_after_commit(session, wake, row.status, _append_status(session, [row]))
    return run


def cancel(session: Session, run_id: int, wake: Wake) -> Literal["cancelled", "requested"] | None:
    """A queued run is cancelled now; a running one is asked to stop after its round; else None."""
    row = repo.cancel_queued(session, run_id, utcnow())
    if row is not None:
        _wake_after_commit(session, wake, row.status, _append_status(session, [row]))
        return "cancelled"
    return "requested" if repo.request_cancel(session, run_id) else None


def resume(session: Session, run_id: int, wake: Wake) -> bool:
    """A failed or cancelled run back to the queue (it continues from its checkpoint); False if not."""
    row = repo.requeue_finished(session, run_id)
    if row is None:
        return False
    _wake_after_commit(session, wake, row.status, _append_status(session, [row]))
    return True


def create_study(session: Session, study: Study, runs: list[Run], wake: Wake) -> Study:
    """A new study and all its runs, queued, with their status events."""
    rows = repo.insert_study(session, study, runs)
    _wake_after_commit(session, wake, "queued", _append_status(session, rows))
    return study


def cancel_study(session: Session, study_id: int, wake: Wake) -> tuple[int, int]:
    """Every unfinished run of the study: queued ones cancelled now, running ones asked to stop after
    their round; (cancelled, asked). Queued ones first: a run claimed meanwhile is then running."""
    rows = repo.cancel_queued_of_study(session, study_id, utcnow())
    asked = repo.request_cancel_of_study(session, study_id)
    appended = _append_status(session, rows)
    if rows:
        _wake_after_commit(session, wake, "cancelled", appended)
    return len(rows), asked


def resume_study(session: Session, study_id: int, wake: Wake) -> list[int]:
    """Every failed or cancelled run of the study back to the queue; their ids (enqueue them after
    the commit)."""
    rows = repo.requeue_finished_of_study(session, study_id)
    appended = _append_status(session, rows)
    if rows:
        _wake_after_commit(session, wake, "queued", appended)
    return [row.run_id for row in rows]


def delete(session: Session, run_id: int) -> str | None:
    """Delete a finished run with its rows and events; None when deleted, else the blocking status."""
    return repo.delete_unless_active(session, run_id)


# -- executor side: each transition is its own transaction -----------------------------------------


def claim(
    store: RunStore, run_id: int, token: str, lease_s: float
) -> tuple[Lease, ClaimedRun] | Deferred | None:
    """Take a queued run, or a running one whose lease expired; None when someone else holds it;
    ``Deferred`` when it belongs to a study that already runs as many runs as it may."""
    with store.session_factory() as session:
        now = utcnow()
        study_id = repo.lock_study_of(session, run_id)
        row = repo.claim(session, run_id, token, now, lease_s, study_id)
        if row is None:
            deferred = study_id is not None and repo.is_claimable(session, run_id, now)
            session.rollback()
            return Deferred(study_id) if deferred and study_id is not None else None
        claimed = repo.claimed_run(session, run_id)
        _commit(store, session, [row])
    return Lease(run_id, token, lease_s), claimed


def renew(store: RunStore, lease: Lease) -> bool:
    """Extend the lease; False when it is no longer ours."""
    with store.session_factory() as session:
        owned = repo.renew(session, lease.run_id, lease.token, utcnow(), lease.lease_s)
        session.commit()
    return owned


ROUND_EVENT_DEVICES = 256
"""At most this many device records in a round event: a run's size must not multiply into every live
stream and the readers' window of recent events (clients page through the rest of a larger round:
GET /api/runs/{id}/rounds/{round}/devices)."""


def round_event(result: RoundResult) -> dict[str, Any]:
    """A round's live event: ``RoundResult.to_json()`` with its first ``ROUND_EVENT_DEVICES`` device
    records (cluster by cluster); a round with more says how many it has (``devices_total``)."""
    devices = result.devices
    data: dict[str, Any] = {
        "round": result.round.to_json(),
        "devices": [d.to_json() for d in devices[:ROUND_EVENT_DEVICES]],
    }
    if len(devices) > ROUND_EVENT_DEVICES:
        data["devices_total"] = len(devices)
    event: dict[str, Any] = sanitize(data)
    return event


def record_round(store: RunStore, lease: Lease, result: RoundResult) -> bool:
    """Store a round, raise ``rounds_done`` and renew the lease; its ``round`` event in the same
    transaction. A round already stored (re-run after a crash) adds nothing: False. ``LeaseLost``
    (nothing written) when the lease is no longer ours."""
    index = result.round.round
    with store.session_factory() as session:
        if not repo.renew(session, lease.run_id, lease.token, utcnow(), lease.lease_s, rounds_done=index + 1):
            session.rollback()
            raise LeaseLost(f"run {lease.run_id}: lease {lease.token!r} was taken over")
        inserted = insert_round(session, lease.run_id, result)
        repo.copy_latest_figures(session, lease.run_id, index)  # the runs listing's figures
        event = [(lease.run_id, ROUND, round_event(result))] if inserted else []
        appended = _append(session, event)
        crash_point("round-before-commit", index)
        session.commit()
        crash_point("round-after-commit", index)
        if inserted:
            store.wake.notify(index, appended.published(session))
    return inserted


def record_checkpoint(store: RunStore, lease: Lease, name: str) -> None:
    """Name ``name`` (a complete file in the run's artifact directory) the run's current checkpoint and
    renew the lease; ``LeaseLost`` (nothing written) when the lease is no longer ours."""
    with store.session_factory() as session:
        if not repo.renew(session, lease.run_id, lease.token, utcnow(), lease.lease_s, checkpoint=name):
            session.rollback()
            raise LeaseLost(f"run {lease.run_id}: lease {lease.token!r} was taken over")
        session.commit()


def finish(store: RunStore, lease: Lease, status: str, error: str | None) -> bool:
    """Succeeded, failed or cancelled, the lease released; False when the lease is no longer ours."""
    with store.session_factory() as session:
        row = repo.finish(session, lease.run_id, lease.token, status, error, utcnow())
        if row is None:
            session.rollback()
            return False
        _commit(store, session, [row])
    return True


def fail_orphan(store: RunStore, run_id: int, token: str, error: str) -> bool:
    """Fail a run whose claimant ``token`` died without finishing (the local executor saw its process
    exit); False when that claimant no longer holds it."""
    return finish(store, Lease(run_id, token, 0.0), "failed", error)


def release(store: RunStore, lease: Lease) -> bool:
    """Back to the queue without finishing (the executor stops); False when the lease is not ours."""
    with store.session_factory() as session:
        row = repo.release(session, lease.run_id, lease.token)
        if row is None:
            session.rollback()
            return False
        _commit(store, session, [row])
    return True


def requeue_stale(store: RunStore) -> list[StatusRow]:
    """Running runs whose lease expired (their claimant is gone) back to the queue."""
    now = utcnow()
    with store.session_factory() as session:
        rows = [
            row
            for run_id in repo.stale_run_ids(session, now)
            if (row := repo.requeue_if_stale(session, run_id, now)) is not None
        ]
        _commit(store, session, rows)
    return rows


def is_cancel_requested(store: RunStore, run_id: int) -> bool:
    with store.session_factory() as session:
        return repo.is_cancel_requested(session, run_id)


def startable_run_ids(store: RunStore, limit: int, study_id: int | None = None) -> list[int]:
    """Queued runs that may start now, oldest first: runs outside studies, and as many of a study's
    queued runs as it has free slots (of ``study_id`` only, when given)."""
    with store.session_factory() as session:
        return repo.startable_run_ids(session, limit, study_id)


def study_of(store: RunStore, run_id: int) -> int | None:
    """The study run ``run_id`` belongs to (None: none, or no such run)."""
    with store.session_factory() as session:
        return repo.study_of(session, run_id)


def attempt_of(session: Session, run_id: int) -> int | None:
    """How many times the run was claimed (None: no such run)."""
    return repo.attempt_of(session, run_id)
