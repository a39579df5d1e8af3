"""SQL of what one user has going: their queued or running runs and their unfinished studies (the
per-user caps of backend.runs.service and backend.studies.service)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import Run, Study

ACTIVE = ("queued", "running")
RESUMABLE = ("failed", "cancelled")


def active_runs(session: Session, owner_id: int) -> int:
    """The owner's queued or running runs (their studies' runs included)."""
    query = select(func.count(Run.id)).where(Run.owner_id == owner_id, Run.status.in_(ACTIVE))
    return int(session.scalar(query) or 0)


def active_studies(session: Session, owner_id: int) -> int:
    """The owner's studies with a run still queued or running."""
    unfinished = select(Run.study_id).where(Run.study_id == Study.id, Run.status.in_(ACTIVE)).exists()
    query = select(func.count(Study.id)).where(Study.owner_id == owner_id, unfinished)
    return int(session.scalar(query) or 0)


def resumable_study_runs(session: Session, study_id: int) -> int:
    """The study's failed or cancelled runs (what resuming it queues again)."""
    query = select(func.count(Run.id)).where(Run.study_id == study_id, Run.status.in_(RESUMABLE))
    return int(session.scalar(query) or 0)
