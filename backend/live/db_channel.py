"""The embedded live channel: events are rows of ``run_events``; readers tail the table.

Works across processes (the local runner's children publish, the API process reads). On PostgreSQL
each publish takes a short exclusive table lock so ids commit in order and a tailing reader that
saw id N can never later find a smaller id committed (SQLite serialises writers anyway).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from anyio import to_thread
from sqlalchemy import select, text

from backend.db.engine import SessionFactory
from backend.db.models import RunEvent
from backend.live.channel import STATUS, LiveEvent

MAX_EVENTS_PER_READ = 500


class DbEventChannel:
    def __init__(self, session_factory: SessionFactory, poll_interval_s: float = 0.1) -> None:
        self.session_factory = session_factory
        self.poll_interval_s = poll_interval_s

    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str:
        with self.session_factory() as session:
            if session.get_bind().dialect.name == "postgresql":
                session.execute(text("LOCK TABLE run_events IN EXCLUSIVE MODE"))
            event = RunEvent(run_id=run_id, kind=kind, data=dict(data))
            session.add(event)
            session.commit()
            return str(event.id)

    def _after(self, run_id: int | None, after: str | None) -> list[LiveEvent]:
        query = select(RunEvent).where(RunEvent.id > _parse_id(after)).order_by(RunEvent.id)
        query = query.where(RunEvent.kind == STATUS if run_id is None else RunEvent.run_id == run_id)
        with self.session_factory() as session:
            rows = session.scalars(query.limit(MAX_EVENTS_PER_READ)).all()
            return [LiveEvent(str(r.id), r.run_id, r.kind, r.data) for r in rows]

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]:
        deadline = time.monotonic() + block_s
        while True:
            events = await to_thread.run_sync(self._after, run_id, after)
            if events or time.monotonic() >= deadline:
                return events
            await asyncio.sleep(self.poll_interval_s)

    def _head(self, run_id: int | None) -> str:
        query = select(RunEvent.id).order_by(RunEvent.id.desc()).limit(1)
        query = query.where(RunEvent.kind == STATUS if run_id is None else RunEvent.run_id == run_id)
        with self.session_factory() as session:
            latest = session.scalar(query)
        return str(latest) if latest is not None else "0"

    async def head(self, run_id: int | None) -> str:
        return await to_thread.run_sync(self._head, run_id)

    def close(self) -> None:
        pass


def _parse_id(after: str | None) -> int:
    """Event ids of this channel are non-negative integers; raises ValueError naming the bad id."""
    if after is None:
        return 0
    if not after.isdigit():
        raise ValueError(f"event id {after!r} is not an id of this stream (a non-negative integer)")
    return int(after)
