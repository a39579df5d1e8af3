"""Server-Sent Events framing and the two event loops (one run; all runs' status changes)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

from backend.db.models import TERMINAL_STATUSES
from backend.live.channel import STATUS, LiveChannel, LiveEvent

RETRY_MS = 2000
FINAL_GRACE_S = 1.0  # after the DB says finished, wait this long for the terminal event to be published


def frame(event: LiveEvent) -> str:
    data = json.dumps(event.data, separators=(",", ":"), allow_nan=False, default=str)
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"


def _is_terminal(event: LiveEvent) -> bool:
    return event.kind == STATUS and event.data.get("status") in TERMINAL_STATUSES


async def run_events(
    channel: LiveChannel,
    run_id: int,
    after: str | None,
    heartbeat_s: float,
    is_finished: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """A run's events after ``after``; ends after the run's last terminal status event."""
    yield f"retry: {RETRY_MS}\n\n"
    while True:
        events = await channel.read(run_id, after, heartbeat_s)
        if not events:
            if await is_finished():
                events = await channel.read(run_id, after, FINAL_GRACE_S)
                if not events:
                    return
            else:
                yield ": keepalive\n\n"
                continue
        for event in events:
            yield frame(event)
            after = event.id
        last = events[-1]
        if _is_terminal(last) and await channel.head(run_id) == last.id and await is_finished():
            return


async def status_events(channel: LiveChannel, after: str, heartbeat_s: float) -> AsyncIterator[str]:
    """Every run's status changes after ``after``, forever (heartbeat comments while idle)."""
    yield f"retry: {RETRY_MS}\n\n"
    while True:
        events = await channel.read(None, after, heartbeat_s)
        if not events:
            yield ": keepalive\n\n"
        for event in events:
            yield frame(event)
            after = event.id
