"""Server-Sent Events framing and the event loops (one run; all runs' status changes; a study's runs).

Both loops wait at most half a heartbeat per read: a read that brings nothing sends a keep-alive
comment (proxies and browsers keep an idle stream open), and the caller's access is checked again
whenever half a heartbeat has passed since the last check, so a revoked caller's stream ends within
one heartbeat with an ``event: revoked``.

While the database is unavailable (restarting, unreachable) an open stream stays open: it sends
keep-alive comments and tries again every ``UNAVAILABLE_RETRY_S``, and goes on from where it was
once the database answers (the caller's access is checked again then). A stream opened meanwhile
gets 503 with Retry-After (backend.error_handlers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from backend.db.models import TERMINAL_STATUSES
from backend.live.channel import ROUND, STATUS, LiveChannel, LiveEvent, Selector
from backend.runtime.outage import is_unavailable

log = logging.getLogger(__name__)

RETRY_MS = 2000
FINAL_GRACE_S = 1.0  # after the DB says finished, wait this long for the tail to bring its terminal event
REVOKED = (
    'event: revoked\ndata: {"message": "your access ended (token revoked, logged out or role changed)"}\n\n'
)

UNAVAILABLE = 'event: unavailable\ndata: {"message": "the live channel failed; reconnect to resume"}\n\n'
KEEPALIVE = ": keepalive\n\n"
UNAVAILABLE_RETRY_S = 1.0

Check = Callable[[], Awaitable[bool]]
T = TypeVar("T")


async def _read(
    channel: LiveChannel, run_id: Selector, after: str | None, block_s: float
) -> list[LiveEvent] | None:
    """The channel's next events; none (after a pause) while the database is unavailable; None when
    the channel failed otherwise (logged; the stream then ends and the client's reconnect resumes it
    with Last-Event-ID)."""
    try:
        return await channel.read(run_id, after, block_s)
    except Exception as err:
        if is_unavailable(err):
            await asyncio.sleep(min(block_s, UNAVAILABLE_RETRY_S))
            return []
        log.exception("live stream of run %s: reading the channel failed; ending the stream", run_id)
        return None


async def _or_while_unavailable(call: Callable[[], Awaitable[T]], fallback: T) -> T:
    """``await call()``, or ``fallback`` while the database is unavailable."""
    try:
        return await call()
    except Exception as err:
        if is_unavailable(err):
            return fallback
        raise


def frame(event: LiveEvent) -> str:
    data = json.dumps(event.data, separators=(",", ":"), allow_nan=False, default=str)
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"


def _is_terminal(event: LiveEvent) -> bool:
    return event.kind == STATUS and event.data.get("status") in TERMINAL_STATUSES


class _Access:
    """Checks the caller again once half a heartbeat has passed since the last check."""

    def __init__(self, allowed: Check, heartbeat_s: float) -> None:
        self._allowed = allowed
        self._period_s = heartbeat_s / 2
        self._checked_at = time.monotonic()

    async def ended(self) -> bool:
        """Whether the caller's access ended (not known while the database is unavailable: checked
        again at the next period)."""
        if time.monotonic() - self._checked_at < self._period_s:
            return False
        self._checked_at = time.monotonic()
        return not await _or_while_unavailable(self._allowed, True)


async def run_events(
    channel: LiveChannel,
    run_id: Selector,
    after: str | None,
    heartbeat_s: float,
    is_finished: Callable[[], Awaitable[bool]],
    allowed: Check,
    shape: Callable[[LiveEvent], LiveEvent] | None = None,
    after_batch: Callable[[], Awaitable[str]] | None = None,
) -> AsyncIterator[str]:
    """A run's events after ``after`` (or a set of runs': a study's); ends after the last terminal
    status event once ``is_finished()``. ``shape`` rewrites each event before it is sent (a study
    sends its runs' rounds compacted: ``compact``); ``after_batch`` gives a frame sent after each
    batch of events (a study's progress)."""
    yield f"retry: {RETRY_MS}\n\n"
    access = _Access(allowed, heartbeat_s)
    while True:
        if await access.ended():
            yield REVOKED
            return
        events = await _read(channel, run_id, after, heartbeat_s / 2)
        if events is None:
            yield UNAVAILABLE
            return
        if not events:
            if await _or_while_unavailable(is_finished, False):  # not known: the stream waits
                events = await _read(channel, run_id, after, FINAL_GRACE_S)
                if not events:
                    return
            else:
                yield KEEPALIVE
                continue
        for event in events:
            yield frame(shape(event) if shape is not None else event)
            after = event.id
        if after_batch is not None:
            progress = await _or_while_unavailable(after_batch, "")
            if progress:
                yield progress
        last = events[-1]
        if (
            _is_terminal(last)
            and await _or_while_unavailable(lambda: channel.head(run_id), "") == last.id
            and await _or_while_unavailable(is_finished, False)
        ):
            return


async def status_events(
    channel: LiveChannel, after: str, heartbeat_s: float, allowed: Check
) -> AsyncIterator[str]:
    """Every run's status changes after ``after``, until the caller's access ends."""
    yield f"retry: {RETRY_MS}\n\n"
    access = _Access(allowed, heartbeat_s)
    while True:
        if await access.ended():
            yield REVOKED
            return
        events = await _read(channel, None, after, heartbeat_s / 2)
        if events is None:
            yield UNAVAILABLE
            return
        if not events:
            yield KEEPALIVE
        for event in events:
            yield frame(event)
            after = event.id


def compact(event: LiveEvent) -> LiveEvent:
    """A study stream's form of a run's event: a round as its run, index, latency and eval loss (the
    devices stay on the run's own stream); a status as it is."""
    if event.kind != ROUND:
        return event
    record = event.data.get("round", {})
    data = {
        "run_id": event.run_id,
        "round": record.get("round"),
        "latency_s": record.get("latency_s"),
        "eval_loss": record.get("eval_loss"),
    }
    return LiveEvent(event.id, event.run_id, event.kind, data)
