"""The live channel: a per-run, replayable, ordered event stream (the seam between executors and SSE).

Semantics every implementation keeps (tests/backend/live/channel_contract.py checks them):

- ``publish(run_id, kind, data)`` appends one event to run ``run_id``'s stream and returns its id.
  It is synchronous (called from run processes, Celery tasks and API request threads) and is called
  only AFTER the transaction that made the event true has committed. Events of kind ``"status"``
  also appear on the stream of all runs (``run_id=None`` below).
- ``read(run_id, after, block_s)`` returns the events after id ``after`` (``None``: from the start)
  in publish order, waiting up to ``block_s`` seconds when there are none yet (an empty list then);
  a malformed ``after`` raises ValueError (before any waiting).
  ``run_id=None`` reads the all-runs status stream.
- ``validate_id(after)`` raises ValueError unless ``after`` could be an id of this channel's streams
  (well formed and in range; it need not exist).
- ``head(run_id)`` is the id of the latest event (``"0"`` when there is none): a client that wants
  only new events starts reading after it.
- Ids are opaque strings, increasing within a stream; SSE sends them as ``id:`` lines and a
  reconnecting client's ``Last-Event-ID`` goes back in as ``after``.

Event kinds and payloads (``data`` is plain JSON):

- ``"round"``: ``RoundResult.to_json()`` of a newly stored round — ``{"round": {...}, "devices": [...]}``.
- ``"status"``: ``{"run_id", "status", "rounds_done", "total_rounds", "error"}``; a status in
  TERMINAL_STATUSES ends a run's SSE stream unless the run was re-queued since.

Implementations: ``DbEventChannel`` (run_events table; embedded default, works across processes),
``MemoryChannel`` (one process; tests), and the workers' Redis Stream channel.

Durable round events (``RoundLog``, Redis Streams and ``MemoryChannel``): a round is committed to the
database first and published second, so a crash in between would leave a stream client without that
round. A ``RoundLog`` channel remembers the highest round each run's stream carries and refuses
(atomically) a round at or below it; the SQL sink publishes every committed round above it when a
run (re)starts and after a failed publish, so a stream client gets every round exactly once, in order.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ROUND = "round"
STATUS = "status"
MAX_EVENT_ID = 2**63 - 1  # integer event ids (database rows, MemoryChannel) fit a BIGINT


def parse_integer_id(after: str | None) -> int:
    """An integer event id (``None``: 0, the start); ValueError naming the id for anything else."""
    if after is None:
        return 0
    if not (after.isascii() and after.isdigit()) or len(after) > 19 or int(after) > MAX_EVENT_ID:
        raise ValueError(
            f"event id {after[:40]!r} is not an id of this stream (an integer from 0 to {MAX_EVENT_ID})"
        )
    return int(after)


@dataclass(frozen=True)
class LiveEvent:
    id: str
    run_id: int
    kind: str
    data: dict[str, Any]


class LiveChannel(Protocol):
    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str: ...

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]: ...

    async def head(self, run_id: int | None) -> str: ...

    def validate_id(self, after: str) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class RoundLog(Protocol):
    """A channel whose round events are exactly-once per (run, round): see the module docstring."""

    def publish_round(self, run_id: int, round_index: int, data: Mapping[str, Any]) -> str | None:
        """Append the round event unless the stream already has this round or a later one (None then)."""
        ...

    def last_published_round(self, run_id: int) -> int:
        """The highest round index the run's stream carries, -1 when none."""
        ...


def status_payload(
    run_id: int, status: str, rounds_done: int, total_rounds: int, error: str | None
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": status,
        "rounds_done": rounds_done,
        "total_rounds": total_rounds,
        "error": error,
    }


@dataclass
class MemoryChannel:
    """Events in a list, for one process (tests and single-process tools). Ids are 1, 2, 3, ..."""

    poll_interval_s: float = 0.01
    _events: list[LiveEvent] = field(default_factory=list)
    _last_round: dict[int, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str:
        with self._lock:
            event = LiveEvent(str(len(self._events) + 1), run_id, kind, dict(data))
            self._events.append(event)
            return event.id

    def publish_round(self, run_id: int, round_index: int, data: Mapping[str, Any]) -> str | None:
        with self._lock:
            if round_index <= self._last_round.get(run_id, -1):
                return None
            self._last_round[run_id] = round_index
            event = LiveEvent(str(len(self._events) + 1), run_id, ROUND, dict(data))
            self._events.append(event)
            return event.id

    def last_published_round(self, run_id: int) -> int:
        with self._lock:
            return self._last_round.get(run_id, -1)

    def validate_id(self, after: str) -> None:
        parse_integer_id(after)

    def _after(self, run_id: int | None, after: str | None) -> list[LiveEvent]:
        start = parse_integer_id(after)
        with self._lock:
            events = self._events[start:]
        if run_id is None:
            return [e for e in events if e.kind == STATUS]
        return [e for e in events if e.run_id == run_id]

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]:
        deadline = time.monotonic() + block_s
        while True:
            events = self._after(run_id, after)
            if events or time.monotonic() >= deadline:
                return events
            await asyncio.sleep(self.poll_interval_s)

    async def head(self, run_id: int | None) -> str:
        events = self._after(run_id, None)
        return events[-1].id if events else "0"

    def close(self) -> None:
        pass
