"""The embedded live channel: events are rows of ``run_events``; readers tail the table.

Works across processes (the local runner's children publish, the API process reads). On PostgreSQL
each publish takes a short exclusive table lock so ids commit in order and a tailing reader that
saw id N can never later find a smaller id committed (SQLite serialises writers anyway).

Waiting readers do not each poll their run's events: one watcher task per event loop polls the
newest event id (``max(id)``, an index lookup) every ``poll_interval_s`` while any reader waits,
and wakes the readers when it grows; only then do they query their own events. So the delay from
a publish to a reader is at most about one poll period, whatever the number of readers, and an
idle server runs no queries.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from anyio import to_thread
from sqlalchemy import func, select, text

from backend.db.engine import SessionFactory
from backend.db.models import RunEvent
from backend.live.channel import STATUS, LiveEvent, parse_integer_id

log = logging.getLogger(__name__)

MAX_EVENTS_PER_READ = 500


class DbEventChannel:
    def __init__(self, session_factory: SessionFactory, poll_interval_s: float = 0.02) -> None:
        self.session_factory = session_factory
        self.poll_interval_s = poll_interval_s
        self._watchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watcher] = (
            weakref.WeakKeyDictionary()
        )

    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str:
        with self.session_factory() as session:
            if session.get_bind().dialect.name == "postgresql":
                session.execute(text("LOCK TABLE run_events IN EXCLUSIVE MODE"))
            event = RunEvent(run_id=run_id, kind=kind, data=dict(data))
            session.add(event)
            session.commit()
            return str(event.id)

    def _latest_id(self) -> int:
        with self.session_factory() as session:
            return int(session.scalar(select(func.max(RunEvent.id))) or 0)

    def _after(self, run_id: int | None, after: str | None) -> tuple[list[LiveEvent], int]:
        """The events after ``after`` and the newest id of any run read just before them."""
        query = select(RunEvent).where(RunEvent.id > parse_integer_id(after)).order_by(RunEvent.id)
        query = query.where(RunEvent.kind == STATUS if run_id is None else RunEvent.run_id == run_id)
        with self.session_factory() as session:
            latest = int(session.scalar(select(func.max(RunEvent.id))) or 0)
            rows = session.scalars(query.limit(MAX_EVENTS_PER_READ)).all()
            return [LiveEvent(str(r.id), r.run_id, r.kind, r.data) for r in rows], latest

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]:
        parse_integer_id(after)  # a malformed id fails before any waiting
        deadline = time.monotonic() + block_s
        while True:
            events, latest = await to_thread.run_sync(self._after, run_id, after)
            remaining_s = deadline - time.monotonic()
            if events or remaining_s <= 0:
                return events
            # nothing for this reader among ids <= latest: wait for any newer event, then look again
            await self._watcher().wait_beyond(latest, remaining_s)

    def _watcher(self) -> _Watcher:
        loop = asyncio.get_running_loop()
        watcher = self._watchers.get(loop)
        if watcher is None:
            watcher = self._watchers[loop] = _Watcher(self._latest_id, self.poll_interval_s)
        return watcher

    def _head(self, run_id: int | None) -> str:
        query = select(RunEvent.id).order_by(RunEvent.id.desc()).limit(1)
        query = query.where(RunEvent.kind == STATUS if run_id is None else RunEvent.run_id == run_id)
        with self.session_factory() as session:
            latest = session.scalar(query)
        return str(latest) if latest is not None else "0"

    async def head(self, run_id: int | None) -> str:
        return await to_thread.run_sync(self._head, run_id)

    def validate_id(self, after: str) -> None:
        parse_integer_id(after)

    def close(self) -> None:
        pass


class _Watcher:
    """Polls the newest event id while readers wait (one task per event loop); wakes them on growth."""

    def __init__(self, latest_id: Any, poll_interval_s: float) -> None:
        self._latest_id = latest_id
        self._poll_interval_s = poll_interval_s
        self._latest = 0
        self._changed = asyncio.Event()
        self._waiting = 0
        self._task: asyncio.Task[None] | None = None

    async def wait_beyond(self, seen_id: int, timeout_s: float) -> None:
        """Return once an event id above ``seen_id`` exists, or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self._waiting += 1
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.create_task(self._poll())
            while self._latest <= seen_id:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    return
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), remaining_s)
                except TimeoutError:
                    return
        finally:
            self._waiting -= 1

    async def _poll(self) -> None:
        while self._waiting > 0:
            try:
                latest = await to_thread.run_sync(self._latest_id)
            except Exception:  # the database is briefly unavailable: readers time out or see it later
                log.exception("live events: polling the newest event id failed; retrying")
                await asyncio.sleep(max(self._poll_interval_s, 1.0))
                continue
            if latest != self._latest:
                self._latest = latest
                self._changed.set()
                self._changed = asyncio.Event()  # waiters hold the set one; later ones get a fresh one
            await asyncio.sleep(self._poll_interval_s)
