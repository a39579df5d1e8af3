"""SQL reads of runs for the API (every write of a run is backend.runtime's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import Row, Select, bindparam, func, select
from sqlalchemy.orm import Session

from backend.db.models import Run, RunEvent, User

# what a run listing shows of the row: every column but the configs (JSON documents of several KB
# each that the list never returns; decoding them was most of a listing's cost)
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
    Run.V.label("V"),  # the attribute's name (its column is v), as RunListItem names it
    Run.num_clusters,
    Run.devices_per_cluster,
)
# a listed run's latest round and latest evaluated round, as the run's row holds them
LATEST_COLUMNS = (
    Run.latest_round,
    Run.latest_latency_s,
    Run.latest_eval_round,
    Run.latest_eval_loss,
    Run.latest_eval_perplexity,
    Run.latest_eval_accuracy,
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


StudyFilter = Literal["", "in", "out", "one"]  # any run; runs of a study; runs of none; one study's


def _page_queries(
    statuses: bool, owner: bool, search: bool, study: StudyFilter = ""
) -> tuple[Select[int], Select[*tuple[Any, ...]]]:
    """The count and page queries of a listing with these filters, their values left as parameters.

    A page's rows are ``LISTED_COLUMNS``, the owner's name and the run's latest figures, the fields of
    ``RunListItem`` in order: columns of the run's row, which storing a round keeps up to date
    (``backend.runtime.repository.copy_latest_figures``), so a listing reads no rounds."""
    conditions: list[Any] = []
    if statuses:
        conditions.append(Run.status.in_(bindparam("statuses", expanding=True)))
    if owner:
        conditions.append(Run.owner_id.in_(select(User.id).where(User.username == bindparam("owner"))))
    if search:
        conditions.append(func.lower(Run.name).contains(bindparam("search"), escape=LIKE_ESCAPE))
    if study == "in":
        conditions.append(Run.study_id.is_not(None))
    elif study == "out":
        conditions.append(Run.study_id.is_(None))
    elif study == "one":
        conditions.append(Run.study_id == bindparam("study_id"))
    count = select(func.count(Run.id)).where(*conditions)
    owner_name = select(User.username).where(User.id == Run.owner_id).scalar_subquery()
    rows = (
        select(*LISTED_COLUMNS, owner_name.label("owner_name"), *LATEST_COLUMNS)
        .where(*conditions)
        .order_by(Run.id.desc())
        .limit(bindparam("limit"))
        .offset(bindparam("offset"))
    )
    return count, rows


# built once per combination of filters: a listing is a hot path, and building statements was a
# good part of its cost
_STUDY_FILTERS: tuple[StudyFilter, ...] = ("", "in", "out", "one")
_PAGE_QUERIES = {
    (s, o, q, t): _page_queries(s, o, q, t)
    for s in (False, True)
    for o in (False, True)
    for q in (False, True)
    for t in _STUDY_FILTERS
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
    in_study: bool | None = None,
    study_id: int | None = None,
) -> tuple[list[Row[Any]], int]:
    """One page of runs, newest first, as rows of ``RunListItem``'s fields; and the number matching.
    ``in_study``: only runs of a study (True) or of none (False); ``study_id``: only that study's."""
    study: StudyFilter = (
        "one" if study_id is not None else "" if in_study is None else "in" if in_study else "out"
    )
    count_query, page_query = _PAGE_QUERIES[bool(statuses), owner is not None, bool(search), study]
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if study_id is not None:
        params["study_id"] = study_id
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


def get_with_live_head(session: Session, run_id: int) -> tuple[Run, str | None, int] | None:
    """The run, its owner's username and the id of its latest live event (0: none yet).

    One statement, so one snapshot: a round's row, ``rounds_done`` and its live event commit
    together, and the event id read here belongs to the rounds ``rounds_done`` counts, never a later
    one. A client that loads rounds up to ``rounds_done - 1`` and then streams the events after this
    id misses no round."""
    owner = select(User.username).where(User.id == Run.owner_id).scalar_subquery()
    last_event = select(func.max(RunEvent.position)).where(RunEvent.run_id == Run.id).scalar_subquery()
    query = (
        select(Run, owner, func.coalesce(last_event, 0))
        .where(Run.id == run_id)
        .execution_options(populate_existing=True)
    )
    row = session.execute(query).first()
    return None if row is None else (row[0], row[1], int(row[2]))


def refresh(session: Session, run: Run) -> Run:
    session.refresh(run)
    return run


def count_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(Run.status, func.count()).group_by(Run.status)).all()
    return {status: int(count) for status, count in rows}
