"""Commit at the boundary, then run what must only happen after the commit (enqueue, publish)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

_KEY = "after_commit"


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Schedule ``action`` for after the session's next successful ``commit_and_notify``."""
    session.info.setdefault(_KEY, []).append(action)


def commit_and_notify(session: Session) -> None:
    """Commit, then run the scheduled actions; a failing action is logged (the commit stands)."""
    session.commit()
    actions: list[Callable[[], None]] = session.info.pop(_KEY, [])
    for action in actions:
        try:
            action()
        except Exception:
            log.exception("after-commit action failed (the data is committed; a dispatcher tick retries)")


def discard_pending(session: Session) -> None:
    session.rollback()
    session.info.pop(_KEY, None)
