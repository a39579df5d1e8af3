"""Riding out a database outage: PostgreSQL restarting, failing over or unreachable for a while.

A running run's writes are fenced by its lease and idempotent (a round is insert-or-ignore, a
checkpoint name and a final status are conditional updates), so the executor retries them while
the database is unavailable, for up to ``OUTAGE_TOLERANCE_S``, instead of failing the run: when the
database answers again the run goes on where it was (or stops with ``LeaseLost`` if its lease was
taken over meanwhile). Live streams keep their clients with heartbeats meanwhile (backend.live.sse).

"Unavailable" is what SQLAlchemy reports as ``OperationalError`` (no connection, a connection lost
mid-statement, a server shutting down, a lock or idle timeout) or ``InterfaceError`` (a connection
already closed); errors of the statement itself (``IntegrityError``, ``DataError``, ...) are not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError

log = logging.getLogger(__name__)

T = TypeVar("T")

OUTAGE_TOLERANCE_S = 300.0
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 5.0)  # then every 5 s


def is_unavailable(err: BaseException) -> bool:
    """Whether ``err`` says the database is unavailable (rather than that a statement is wrong)."""
    return isinstance(err, OperationalError | InterfaceError)


_sleep = time.sleep


def through_outage(operation: Callable[[], T], what: str, tolerance_s: float = OUTAGE_TOLERANCE_S) -> T:
    """``operation()``, tried again while the database is unavailable (``what`` names it in the log),
    for up to ``tolerance_s`` seconds; then its last error is raised. Other errors are raised at once.
    ``operation`` must be safe to repeat (its effect committed at most once)."""
    deadline = time.monotonic() + tolerance_s
    attempt = 0
    while True:
        try:
            result = operation()
        except (OperationalError, InterfaceError) as err:
            if time.monotonic() >= deadline:
                log.error("%s: the database is still unavailable after %.0f s; giving up", what, tolerance_s)
                raise
            if attempt == 0:
                log.warning("%s: the database is unavailable (%s); trying again", what, _first_line(err))
            _sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1
            continue
        if attempt:
            log.warning("%s: the database answers again (after %d attempts)", what, attempt + 1)
        return result


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "orig", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__
