"""A run as its page opens it: the detail with its owner's name and the head of its live stream."""

from __future__ import annotations

from sqlalchemy.orm import Session

from backend.errors import NotFound
from backend.runs import repository as repo
from backend.runs.schemas import RunDetail, RunView


def view(session: Session, run_id: int) -> RunView:
    found = repo.get_with_live_head(session, run_id)
    if found is None:
        raise NotFound(f"no run with id {run_id}")
    run, owner_name, last_event_id = found
    detail = RunDetail.model_validate(run)
    return RunView(**dict(detail), owner_name=owner_name, last_event_id=str(last_event_id))
