"""The LiveChannel contract on MemoryChannel and on DbEventChannel (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy.orm import Session, sessionmaker

from backend.live.channel import ROUND, LiveChannel, MemoryChannel
from backend.live.db_channel import DbEventChannel
from tests.backend.builders import insert_run
from tests.backend.live.channel_contract import CHECKS

Check = Callable[[LiveChannel, int, int], None]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_memory_channel(check: Check) -> None:
    check(MemoryChannel(), 1, 2)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_db_event_channel(check: Check, session_factory: sessionmaker[Session]) -> None:
    run_a, run_b = insert_run(session_factory), insert_run(session_factory)
    check(DbEventChannel(session_factory, poll_interval_s=0.02), run_a, run_b)


def test_db_channel_wakes_each_waiting_reader(session_factory: sessionmaker[Session]) -> None:
    """Readers of several runs wait on one watcher; an event of one run wakes the others only to look
    again, and each reader gets exactly its run's events."""
    run_a, run_b = insert_run(session_factory), insert_run(session_factory)
    channel = DbEventChannel(session_factory, poll_interval_s=0.01)

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        readers = [asyncio.create_task(channel.read(run, None, 30.0)) for run in (run_a, run_a, run_b)]
        await asyncio.sleep(0.1)  # all three are waiting now
        await asyncio.to_thread(channel.publish, run_b, ROUND, {"round": {"round": 0}})
        b_events = await readers[2]
        assert not readers[0].done() and not readers[1].done()
        await asyncio.to_thread(channel.publish, run_a, ROUND, {"round": {"round": 7}})
        a1, a2 = await asyncio.gather(readers[0], readers[1])
        return [e.kind for e in b_events], [str(e.data) for e in a1], [str(e.data) for e in a2]

    b_kinds, a1, a2 = asyncio.run(scenario())
    assert b_kinds == [ROUND] and a1 == a2 == [str({"round": {"round": 7}})]
