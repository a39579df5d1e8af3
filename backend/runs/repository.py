"""SQL of the runs lifecycle as the API sees it (the executor side is lease_repository.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from backend.db.models import Run, User


def get(session: Session, run_id: int) -> Run | None:
    return session.get(Run, run_id)


def status_of(session: Session, run_id: int) -> str | None:
    status: str | None = session.scalar(select(Run.status).where(Run.id == run_id))
    return status


def get_many(session: Session, run_ids: Sequence[int]) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.id.in_(run_ids))))


def add(session: Session, run: Run) -> Run:
    session.add(run)
    session.flush()
    return run


def delete(session: Session, run: Run) -> None:
    session.delete(run)
    session.flush()


def page(
    session: Session,
    statuses: Sequence[str],
    owner: str | None,
    search: str | None,
    limit: int,
    offset: int,
) -> tuple[list[Run], int]:
    query = select(Run)
    if statuses:
        query = query.where(Run.status.in_(statuses))
    if owner is not None:
        query = query.join(User, User.id == Run.owner_id).where(User.username == owner)
    if search:
        query = query.where(func.lower(Run.name).contains(search.lower(), autoescape=True))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    items = session.scalars(query.order_by(Run.id.desc()).limit(limit).offset(offset))
    return list(items), int(total)


def _conditional(session: Session, run_id: int, from_statuses: Sequence[str], **values: Any) -> bool:
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.status.in_(from_statuses))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def cancel_if_queued(session: Session, run_id: int, now: Any) -> bool:
    return _conditional(session, run_id, ["queued"], status="cancelled", finished_at=now)


def request_cancel_if_running(session: Session, run_id: int) -> bool:
    return _conditional(session, run_id, ["running"], cancel_requested=True)


def requeue_if_finished_badly(session: Session, run_id: int) -> bool:
    return _conditional(
        session,
        run_id,
        ["failed", "cancelled"],
        status="queued",
        error=None,
        cancel_requested=False,
        finished_at=None,
    )


def refresh(session: Session, run: Run) -> Run:
    session.refresh(run)
    return run


def count_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(Run.status, func.count()).group_by(Run.status)).all()
    return {status: int(count) for status, count in rows}
