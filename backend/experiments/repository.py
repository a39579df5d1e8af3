"""SQL of saved experiments."""

from __future__ import annotations

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from backend.db.models import Experiment, Run


def get(session: Session, experiment_id: int) -> Experiment | None:
    return session.get(Experiment, experiment_id)


def add(session: Session, experiment: Experiment) -> Experiment:
    session.add(experiment)
    session.flush()
    return experiment


def delete(session: Session, experiment: Experiment) -> None:
    session.delete(experiment)
    session.flush()


def _filtered(query: Select[Experiment], search: str | None) -> Select[Experiment]:
    if search:
        query = query.where(func.lower(Experiment.name).contains(search.lower(), autoescape=True))
    return query


def page(session: Session, search: str | None, limit: int, offset: int) -> tuple[list[Experiment], int]:
    query = _filtered(select(Experiment), search)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    items = session.scalars(query.order_by(Experiment.id.desc()).limit(limit).offset(offset)).all()
    return list(items), int(total)


def count_runs(session: Session, experiment_id: int) -> int:
    query = select(func.count()).select_from(Run).where(Run.experiment_id == experiment_id)
    return int(session.scalar(query) or 0)


def count_active_runs(session: Session, experiment_id: int) -> int:
    query = (
        select(func.count())
        .select_from(Run)
        .where(Run.experiment_id == experiment_id, Run.status.in_(("queued", "running")))
    )
    return int(session.scalar(query) or 0)
