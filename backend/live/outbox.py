"""The live channel in both deployments: readers tail the outbox table ``run_events``.

Events are rows the run lifecycle wrote in the same transaction as the state they report; an event's
id is its ``position``, given by the database in commit order (backend.db.models.OUTBOX_ORDER), so a
reader resuming after id N gets every later event once, in order, whatever process died when.

Waiting readers share one tail per event loop (:class:`_Tail`): while any reader waits, one task
reads the rows after the newest id it has seen (an index range scan that returns nothing when
nothing happened) whenever the ``Waiter`` says so — every ``sse_poll_interval_s`` in the embedded
default, or at once on a Redis wake-up (and at least once a second) with executor=celery — and keeps
the latest ``recent_events`` events in memory (and no more than ``recent_bytes`` of their data: a
large run's events do not multiply into the API's memory). A Redis wake-up carries the events its transaction
committed: when they directly follow the newest id the tail has, it appends them without a query
(on a gap it reads the table). A reader whose resume point lies inside the window is answered from
memory; a reader further behind, or reading a run's stream from its start, queries the table first.
So a new event costs at most one query per API process whatever the number of readers, and an idle
server runs no queries.

Retention: a run's events are kept as long as the run (they are deleted with it).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import time
import weakref

from anyio import to_thread
from sqlalchemy import ColumnElement, func, select

from backend.db.engine import SessionFactory
from backend.db.models import RunEvent
from backend.live.channel import STATUS, LiveEvent, Selector, parse_integer_id
from backend.runtime.wake import PollWaiter, Waiter

log = logging.getLogger(__name__)

MAX_EVENTS_PER_READ = 500
RECENT_EVENTS = 2000
RECENT_BYTES = 32 * 2**20  # the window also holds at most this much event data (as JSON)


def _selected(run_id: Selector) -> ColumnElement[bool]:
    if run_id is None:
        return RunEvent.kind == STATUS
    if isinstance(run_id, frozenset):
        return RunEvent.run_id.in_(sorted(run_id))
    return RunEvent.run_id == run_id


def _is_selected(event: LiveEvent, run_id: Selector) -> bool:
    if run_id is None:
        return event.kind == STATUS
    if isinstance(run_id, frozenset):
        return event.run_id in run_id
    return event.run_id == run_id


class OutboxChannel:
    def __init__(
        self,
        session_factory: SessionFactory,
        waiter: Waiter | None = None,
        recent_events: int = RECENT_EVENTS,
        recent_bytes: int = RECENT_BYTES,
    ) -> None:
        self.session_factory = session_factory
        self.waiter: Waiter = waiter or PollWaiter(0.02)
        self.recent_events = recent_events
        self.recent_bytes = recent_bytes
        self._tails: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Tail] = weakref.WeakKeyDictionary()

    def _latest_id(self) -> int:
        with self.session_factory() as session:
            return int(session.scalar(select(func.max(RunEvent.position))) or 0)

    def _rows_after(self, after: int, run_id: Selector, all_runs: bool) -> list[LiveEvent]:
        """Up to MAX_EVENTS_PER_READ events after id ``after``: of every run (``all_runs``), of the
        status stream (``run_id`` None), of one run, or of a set of runs."""
        query = (
            select(RunEvent.position, RunEvent.run_id, RunEvent.kind, RunEvent.data)
            .where(RunEvent.position > after)
            .order_by(RunEvent.position)
            .limit(MAX_EVENTS_PER_READ)
        )
        if not all_runs:
            query = query.where(_selected(run_id))
        with self.session_factory() as session:
            return [LiveEvent(str(p), run, kind, data) for p, run, kind, data in session.execute(query)]

    async def read(self, run_id: Selector, after: str | None, block_s: float) -> list[LiveEvent]:
        start = parse_integer_id(after)  # a malformed id fails before any waiting
        tail = await self._tail()
        deadline = time.monotonic() + block_s
        while True:
            seen = tail.latest
            # a stream from its start reads the table: the window may still hold the events of a
            # deleted run whose id was given to a new run
            events = tail.events_after(run_id, start) if start > 0 else None
            if events is None:  # behind the window kept in memory: read the table
                events = await to_thread.run_sync(self._rows_after, start, run_id, False)
                if not events:
                    # none of the reader's events up to ``seen`` (ids commit in order and the table
                    # was read after the tail): from here on the window answers
                    start = max(start, seen)
            remaining_s = deadline - time.monotonic()
            if events or remaining_s <= 0:
                return events
            await tail.wait_beyond(seen, remaining_s)

    async def _tail(self) -> _Tail:
        loop = asyncio.get_running_loop()
        tail = self._tails.get(loop)
        if tail is None:
            latest = await to_thread.run_sync(self._latest_id)
            tail = self._tails.setdefault(loop, _Tail(self, latest))
        return tail

    def _head(self, run_id: Selector) -> str:
        query = (
            select(RunEvent.position)
            .where(_selected(run_id), RunEvent.position.is_not(None))
            .order_by(RunEvent.position.desc())
            .limit(1)
        )
        with self.session_factory() as session:
            latest = session.scalar(query)
        return str(latest) if latest is not None else "0"

    async def head(self, run_id: Selector) -> str:
        return await to_thread.run_sync(self._head, run_id)

    def validate_id(self, after: str) -> None:
        parse_integer_id(after)

    async def aclose(self) -> None:
        closer = getattr(self.waiter, "aclose", None)
        if closer is not None:
            await closer()


def _size_bytes(event: LiveEvent) -> int:
    return len(json.dumps(event.data, separators=(",", ":"), default=str))


class _Tail:
    """The newest events of every run, kept in memory and extended by one polling task while readers
    wait. ``events`` holds every event with ``base < id <= latest``, in id order."""

    def __init__(self, channel: OutboxChannel, latest: int) -> None:
        self._channel = channel
        self.base = latest
        self.latest = latest
        self._events: list[LiveEvent] = []
        self._ids: list[int] = []
        self._sizes: list[int] = []  # of each event's data as JSON
        self._bytes = 0
        self._changed = asyncio.Event()
        self._waiting = 0
        self._task: asyncio.Task[None] | None = None
        self._failing = False  # the last read of the table failed (logged once until one works)

    def events_after(self, run_id: Selector, after: int) -> list[LiveEvent] | None:
        """The reader's events after ``after`` known so far, or None when ``after`` is older than the
        window (the caller reads the table)."""
        if after < self.base:
            return None
        found: list[LiveEvent] = []
        for event in self._events[bisect.bisect_right(self._ids, after) :]:
            if _is_selected(event, run_id):
                found.append(event)
                if len(found) == MAX_EVENTS_PER_READ:
                    break
        return found

    async def wait_beyond(self, seen_id: int, timeout_s: float) -> None:
        """Return once the tail holds an id above ``seen_id``, or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self._waiting += 1
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.create_task(self._poll())
            while self.latest <= seen_id:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    return
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining_s)
                except TimeoutError:
                    return
        finally:
            self._waiting -= 1

    async def _poll(self) -> None:
        channel = self._channel
        waiter = channel.waiter
        while self._waiting > 0:
            generation = waiter.generation()
            rows = self._following(waiter.take_events())
            if rows is None:
                try:
                    rows = await to_thread.run_sync(channel._rows_after, self.latest, None, True)
                except Exception as err:  # the database is unavailable: readers wait, and see it later
                    if not self._failing:
                        log.warning("live events: reading new events failed (%s); retrying every second", err)
                    self._failing = True
                    await asyncio.sleep(1.0)
                    continue
                if self._failing:
                    log.warning("live events: reading new events works again")
                    self._failing = False
            if rows:
                self._append(rows)
                self._changed.set()
                self._changed = asyncio.Event()  # waiters hold the set one; later ones get a fresh one
            if len(rows) < MAX_EVENTS_PER_READ:
                await waiter.wait(generation, 1.0)

    def _following(self, carried: list[LiveEvent] | None) -> list[LiveEvent] | None:
        """The events carried by wake-ups that directly follow ``latest`` (ids commit in order, so
        nothing can still come before them), or None when the table must be read: no events were
        carried (a timeout, a bare wake-up) or their ids leave a gap (a wake-up was lost, or an id
        was skipped by a rolled-back transaction)."""
        if not carried:
            return None
        fresh = [event for event in carried if int(event.id) > self.latest]
        expected = self.latest
        for event in fresh:
            expected += 1
            if int(event.id) != expected:
                return None
        return fresh

    def _append(self, rows: list[LiveEvent]) -> None:
        self._events.extend(rows)
        self._ids.extend(int(e.id) for e in rows)
        sizes = [_size_bytes(e) for e in rows]
        self._sizes.extend(sizes)
        self._bytes += sum(sizes)
        self.latest = self._ids[-1]
        # drop the oldest beyond recent_events, then more while their data exceeds recent_bytes
        # (the newest event always stays)
        excess = max(0, len(self._events) - self._channel.recent_events)
        dropped = sum(self._sizes[:excess])
        while excess < len(self._events) - 1 and self._bytes - dropped > self._channel.recent_bytes:
            dropped += self._sizes[excess]
            excess += 1
        if excess:
            self.base = self._ids[excess - 1]
            self._bytes -= dropped
            del self._events[:excess], self._ids[:excess], self._sizes[:excess]
