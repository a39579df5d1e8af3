"""The SSE loops while the database is unavailable: an open stream stays open with keep-alives and
goes on where it was; a new one is refused with 503 and Retry-After (the dashboard retries)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from backend.live import sse
from backend.live.channel import ROUND, STATUS, LiveEvent, Selector
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api

EVENTS = [
    LiveEvent("7", 1, ROUND, {"round": {"round": 0}}),
    LiveEvent("8", 1, STATUS, {"run_id": 1, "status": "succeeded"}),
]


def _unavailable() -> OperationalError:
    return OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))


class Outage:
    """The database is unavailable for the first ``calls`` calls of anything that reads it."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def check(self) -> None:
        if self.calls > 0:
            self.calls -= 1
            raise _unavailable()


class Channel:
    """A live channel that reads through ``outage``: the run's two events, then nothing."""

    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    async def read(self, run_id: Selector, after: str | None, block_s: float) -> list[LiveEvent]:
        self.outage.check()
        return [e for e in EVENTS if int(e.id) > int(after or 0)]

    async def head(self, run_id: Selector) -> str:
        self.outage.check()
        return EVENTS[-1].id

    def validate_id(self, after: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def _frames(stream: AsyncIterator[str]) -> list[str]:
    return [frame async for frame in stream]


def test_an_open_run_stream_waits_through_an_outage_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "UNAVAILABLE_RETRY_S", 0.0)
    outage = Outage(calls=6)

    async def is_finished() -> bool:
        outage.check()
        return True

    async def allowed() -> bool:
        outage.check()
        return True

    stream = sse.run_events(Channel(outage), 1, None, 0.0, is_finished, allowed)
    frames = asyncio.run(asyncio.wait_for(_frames(stream), 10))
    assert sse.UNAVAILABLE not in frames and sse.REVOKED not in frames
    assert frames.count(sse.KEEPALIVE) >= 2  # it waited with the client
    sent = [f for f in frames if f.startswith("id:")]
    assert sent == [sse.frame(e) for e in EVENTS]  # then every event once, and the stream ended


def test_the_status_stream_waits_through_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "UNAVAILABLE_RETRY_S", 0.0)
    outage = Outage(calls=3)

    async def allowed() -> bool:
        return True

    async def first_event() -> list[str]:
        frames = []
        async for frame in sse.status_events(Channel(outage), "6", 0.0, allowed):
            frames.append(frame)
            if frame.startswith("id:"):
                return frames
        return frames

    frames = asyncio.run(asyncio.wait_for(first_event(), 10))
    assert sse.UNAVAILABLE not in frames and frames[-1] == sse.frame(EVENTS[0])


def test_other_failures_of_the_channel_still_end_the_stream() -> None:
    class Broken(Channel):
        async def read(self, run_id: Selector, after: str | None, block_s: float) -> list[LiveEvent]:
            raise RuntimeError("a bug")

    async def allowed() -> bool:
        return True

    frames = asyncio.run(_frames(sse.run_events(Broken(Outage(0)), 1, None, 1.0, allowed, allowed)))
    assert frames[-1] == sse.UNAVAILABLE


def test_a_stream_opened_while_the_database_is_unavailable_gets_503_with_retry_after(api: Api) -> None:
    launched = api.client.post("/api/runs", json={"config": tiny_config()}, headers=api.as_("operator"))
    run_id = launched.json()["id"]
    working = api.app.state.session_factory

    def unavailable() -> Any:
        raise _unavailable()

    api.app.state.session_factory = unavailable
    try:
        for path in (f"/api/runs/{run_id}/events", "/api/runs/events"):
            response = api.client.get(path, headers=api.as_("viewer"))
            assert response.status_code == 503, (path, response.text)
            assert response.headers["Retry-After"] == "5"
            assert response.json()["error"]["code"] == "database_unavailable"
    finally:
        api.app.state.session_factory = working
