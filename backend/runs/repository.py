"""SQL reads of runs for the API (every write of a run is backend.runtime's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Select, bindparam, func, select
from sqlalchemy.orm import Session

from backend.db.models import Run, User

# what a run listing shows: every column but the configs (JSON documents of several KB each that
# the list never returns; decoding them was most of a listing's cost)
LISTED_COLUMNS = (
    Run.id,
    Run.name,
    Run.experiment_id,
    Run.status,
    Run.owner_id,
    Run.created_at,
    Run.started_at,
    Run.finished_at,
    Run.rounds_done,
    Run.total_rounds,
    Run.error,
    Run.cancel_requested,
    Run.attempt,
    Run.parent_run_id,
    Run.fork_round,
    Run.policy,
    Run.executor,
)


def get(session: Session, run_id: int) -> Run | None:
    return session.get(Run, run_id)


def exists(session: Session, run_id: int) -> bool:
    return session.scalar(select(Run.id).where(Run.id == run_id)) is not None


def status_of(session: Session, run_id: int) -> str | None:
    status: str | None = session.scalar(select(Run.status).where(Run.id == run_id))
    return status


def get_many(session: Session, run_ids: Sequence[int]) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.id.in_(run_ids))))


LIKE_ESCAPE = "/"  # escapes %, _ and itself in a listing's search text


def _page_queries(statuses: bool, owner: bool, search: bool) -> tuple[Select[int], Select[*tuple[Any, ...]]]:
    """The count and page queries of a listing with these filters, their values left as parameters."""
    conditions: list[Any] = []
    if statuses:
        conditions.append(Run.status.in_(bindparam("statuses", expanding=True)))
    if owner:
        conditions.append(Run.owner_id.in_(select(User.id).where(User.username == bindparam("owner"))))
    if search:
        conditions.append(func.lower(Run.name).contains(bindparam("search"), escape=LIKE_ESCAPE))
    count = select(func.count(Run.id)).where(*conditions)
    rows = select(*LISTED_COLUMNS).where(*conditions).order_by(Run.id.desc())
    return count, rows.limit(bindparam("limit")).offset(bindparam("offset"))


# built once per combination of filters: a listing is a hot path, and building statements was a
# good part of its cost
_PAGE_QUERIES = {
    (s, o, q): _page_queries(s, o, q) for s in (False, True) for o in (False, True) for q in (False, True)
}


def _like_escaped(text: str) -> str:
    """``text`` matched literally by LIKE with ``ESCAPE '/'`` (as ``contains(autoescape=True)``)."""
    for char in (LIKE_ESCAPE, "%", "_"):
        text = text.replace(char, LIKE_ESCAPE + char)
    return text


def page(
    session: Session,
    statuses: Sequence[str],
    owner: str | None,
    search: str | None,
    limit: int,
    offset: int,
) -> tuple[list[Row[Any]], int]:
    """One page of runs, newest first, as rows of ``LISTED_COLUMNS``; and the number matching."""
    count_query, page_query = _PAGE_QUERIES[bool(statuses), owner is not None, bool(search)]
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if statuses:
        params["statuses"] = list(statuses)
    if owner is not None:
        params["owner"] = owner
    if search:
        params["search"] = _like_escaped(search.lower())
    connection = session.connection()
    total = connection.execute(count_query, params).scalar() or 0
    rows: list[Row[Any]] = list(connection.execute(page_query, params).all())
    return rows, int(total)


def refresh(session: Session, run: Run) -> Run:
    session.refresh(run)
    return run


def count_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(Run.status, func.count()).group_by(Run.status)).all()
    return {status: int(count) for status, count in rows}
