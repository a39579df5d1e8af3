"""The live channel of both deployments: the outbox table read by ``OutboxChannel``.

``embedded``: SQLite, readers poll. ``production``: PostgreSQL, writers wake readers through Redis.
Events are written as the lifecycle writes them (``append_events`` in a transaction, commit, wake).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from backend.db.engine import SessionLimits, make_engine, make_session_factory
from backend.db.models import Run
from backend.live.channel import ROUND, LiveEvent
from backend.live.outbox import OutboxChannel
from backend.runtime import repository as repo
from backend.runtime.redis_wake import MAX_CARRIED_BYTES, RedisWake, RedisWakeListener
from backend.runtime.wake import NoWake, PollWaiter, Waiter, Wake
from backend.settings import Settings
from tests.backend.builders import insert_run
from tests.backend.live.channel_contract import CHECKS, Publish
from tests.deployment_params import EMBEDDED

Check = Callable[..., None]


def publisher(factory: sessionmaker[Session], wake: Wake) -> Publish:
    def publish(run_id: int, kind: str, data: dict[str, Any]) -> str:
        with factory() as session:
            (row_id,) = repo.append_events(session, [(run_id, kind, data)])
            session.commit()
            position = repo.event_positions(session, [row_id])[row_id]
        wake.notify(kind, [LiveEvent(str(position), run_id, kind, data)])
        return str(position)

    return publish


@pytest.fixture
def wiring(deployment: str, settings: Settings) -> Iterator[tuple[Waiter, Wake]]:
    """The deployment's readers' waiter and writers' wake (as backend.composition builds them)."""
    if deployment == EMBEDDED:
        yield PollWaiter(0.02), NoWake()
        return
    wake = RedisWake(settings.redis_url, settings.redis_key_prefix)
    yield RedisWakeListener(settings.redis_url, settings.redis_key_prefix), wake
    wake.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_outbox_channel(
    check: Check, session_factory: sessionmaker[Session], wiring: tuple[Waiter, Wake]
) -> None:
    run_a, run_b = insert_run(session_factory), insert_run(session_factory)
    waiter, wake = wiring
    check(OutboxChannel(session_factory, waiter), publisher(session_factory, wake), run_a, run_b)


def test_waiting_readers_share_one_tail_and_get_only_their_run(
    session_factory: sessionmaker[Session], wiring: tuple[Waiter, Wake]
) -> None:
    """Readers of several runs wait on one tail; an event of one run wakes the others only to look
    again, and each reader gets exactly its run's events."""
    run_a, run_b = insert_run(session_factory), insert_run(session_factory)
    waiter, wake = wiring
    channel = OutboxChannel(session_factory, waiter)
    publish = publisher(session_factory, wake)

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        readers = [asyncio.create_task(channel.read(run, None, 30.0)) for run in (run_a, run_a, run_b)]
        await asyncio.sleep(0.2)  # all three are waiting now
        await asyncio.to_thread(publish, run_b, ROUND, {"round": {"round": 0}})
        b_events = await readers[2]
        assert not readers[0].done() and not readers[1].done()
        await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": 7}})
        a1, a2 = await asyncio.gather(readers[0], readers[1])
        await channel.aclose()
        return [e.kind for e in b_events], [str(e.data) for e in a1], [str(e.data) for e in a2]

    b_kinds, a1, a2 = asyncio.run(scenario())
    assert b_kinds == [ROUND] and a1 == a2 == [str({"round": {"round": 7}})]


@pytest.mark.deployments("production")
def test_a_redis_wake_up_brings_the_event_before_the_fallback_poll(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    """With a 30 s fallback poll, only the wake-up can deliver the event within seconds."""
    run_a = insert_run(session_factory)
    listener = RedisWakeListener(settings.redis_url, settings.redis_key_prefix, fallback_poll_s=30.0)
    channel = OutboxChannel(session_factory, listener)
    wake = RedisWake(settings.redis_url, settings.redis_key_prefix)
    publish = publisher(session_factory, wake)

    async def scenario() -> float:
        reader = asyncio.create_task(channel.read(run_a, None, 20.0))
        await asyncio.sleep(0.5)  # subscribed and waiting
        started = time.monotonic()
        await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": 0}})
        events = await reader
        elapsed = time.monotonic() - started
        await channel.aclose()
        assert [e.data for e in events] == [{"round": {"round": 0}}]
        return elapsed

    assert asyncio.run(scenario()) < 5.0
    wake.close()


@pytest.mark.deployments("production")
def test_a_lost_wake_up_costs_latency_not_the_event(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    """A writer that dies between its commit and its wake-up: readers still find the event."""
    run_a = insert_run(session_factory)
    listener = RedisWakeListener(settings.redis_url, settings.redis_key_prefix, fallback_poll_s=0.3)
    channel = OutboxChannel(session_factory, listener)
    publish = publisher(session_factory, NoWake())

    async def scenario() -> list[Any]:
        reader = asyncio.create_task(channel.read(run_a, None, 20.0))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": 0}})
        events = await asyncio.wait_for(reader, 5.0)
        await channel.aclose()
        return [e.data for e in events]

    assert asyncio.run(scenario()) == [{"round": {"round": 0}}]


@pytest.mark.deployments("production")  # SQLite has one writer at a time by design
def test_a_writer_holding_its_transaction_open_delays_no_other_and_ids_follow_commit_order(
    database_url: str, session_factory: sessionmaker[Session], wiring: tuple[Waiter, Wake]
) -> None:
    """An event appended in a transaction that stays open (a worker frozen inside its round) blocks
    no other writer, and no reader sees it until it commits; it then gets an id after every event
    committed meanwhile, so a reader resuming after the ids it saw still gets it."""
    run_a, run_b = insert_run(session_factory), insert_run(session_factory)
    waiter, wake = wiring
    channel = OutboxChannel(session_factory, waiter)
    # the other writer's connections give up waiting for a lock after a second
    impatient = make_engine(database_url, SessionLimits(idle_in_transaction_s=60.0, lock_timeout_s=1.0))
    publish = publisher(make_session_factory(impatient), wake)
    held = session_factory()
    repo.append_events(held, [(run_a, ROUND, {"round": {"round": 0}})])

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        # another run's event commits while the transaction is open, and a reader of every run's
        # events (a study's set) sees only it
        first = await asyncio.to_thread(publish, run_b, ROUND, {"round": {"round": 5}})
        seen = await channel.read(frozenset({run_a, run_b}), None, 1.0)
        await asyncio.to_thread(held.commit)
        later = await channel.read(frozenset({run_a, run_b}), seen[-1].id, 5.0)
        whole = await channel.read(run_a, None, 5.0)
        await channel.aclose()
        assert [e.id for e in seen] == [first]
        return [e.data for e in seen], [e.data for e in later], [e.data for e in whole]

    try:
        seen, later, whole = asyncio.run(scenario())
    finally:
        held.close()
        impatient.dispose()
    assert seen == [{"round": {"round": 5}}]
    assert later == whole == [{"round": {"round": 0}}]  # committed last: after the id the reader saw


def test_a_stream_from_the_start_never_shows_a_deleted_runs_events(
    session_factory: sessionmaker[Session], wiring: tuple[Waiter, Wake]
) -> None:
    """SQLite gives a deleted newest run's id to the next run: the new run's stream must not replay
    the old events the readers' shared window still holds."""
    waiter, wake = wiring
    channel = OutboxChannel(session_factory, waiter)
    publish = publisher(session_factory, wake)
    old = insert_run(session_factory)

    async def scenario() -> list[Any]:
        reader = asyncio.create_task(channel.read(old, None, 10.0))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(publish, old, ROUND, {"round": {"round": 0}})
        assert len(await reader) == 1  # the window now holds it
        with session_factory() as session:
            session.execute(delete(Run).where(Run.id == old))
            session.commit()
        assert insert_run(session_factory, id=old) == old
        await asyncio.to_thread(publish, old, ROUND, {"round": {"round": 7}})
        events = await channel.read(old, None, 5.0)
        await channel.aclose()
        return [e.data for e in events]

    assert asyncio.run(scenario()) == [{"round": {"round": 7}}]


def test_the_window_of_recent_events_is_bounded_in_bytes_and_readers_behind_it_read_the_table(
    session_factory: sessionmaker[Session], wiring: tuple[Waiter, Wake]
) -> None:
    """Large events (a large run's rounds) must not multiply into the API's memory: the readers'
    shared window keeps at most ``recent_bytes`` of event data; a reader behind it reads the table."""
    run_a = insert_run(session_factory)
    waiter, wake = wiring
    channel = OutboxChannel(session_factory, waiter, recent_bytes=2500)
    publish = publisher(session_factory, wake)
    padding = "x" * 1000  # ~1 KB per event

    async def scenario() -> tuple[list[Any], int, int]:
        first = await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": 0}, "p": padding})
        reader = asyncio.create_task(_read_until(channel, run_a, first, 5))
        await asyncio.sleep(0.1)
        for n in range(1, 6):
            await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": n}, "p": padding})
        events = await asyncio.wait_for(reader, 10)
        tail = await channel._tail()
        kept = len(tail._events)
        behind = await channel.read(run_a, first, 1.0)  # older than the window: from the table
        await channel.aclose()
        return [e.data["round"]["round"] for e in events + behind], kept, tail._bytes

    rounds, kept, kept_bytes = asyncio.run(scenario())
    assert rounds == [1, 2, 3, 4, 5] * 2
    assert kept == 2 and kept_bytes <= 2500


async def _read_until(channel: OutboxChannel, run_id: int, after: str, count: int) -> list[LiveEvent]:
    events: list[LiveEvent] = []
    while len(events) < count:
        events += await channel.read(run_id, events[-1].id if events else after, 5.0)
    return events


def _counting_table_reads(channel: OutboxChannel) -> list[int]:
    """Count the channel's reads of the table (one element per read)."""
    reads: list[int] = []
    rows_after = channel._rows_after

    def counted(*args: Any) -> Any:
        reads.append(1)
        return rows_after(*args)

    channel._rows_after = counted  # type: ignore[method-assign]
    return reads


@pytest.mark.deployments("production")
def test_events_carried_by_wake_ups_are_delivered_without_reading_the_table(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    """A wake-up carries its transaction's events: a reader that has every earlier one gets them
    with no query, in order."""
    run_a = insert_run(session_factory)
    listener = RedisWakeListener(settings.redis_url, settings.redis_key_prefix, fallback_poll_s=30.0)
    channel = OutboxChannel(session_factory, listener)
    wake = RedisWake(settings.redis_url, settings.redis_key_prefix)
    publish = publisher(session_factory, wake)
    reads = _counting_table_reads(channel)

    async def scenario() -> tuple[list[Any], int]:
        await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": 0}})
        (first,) = await channel.read(run_a, None, 5.0)  # a stream from its start reads the table
        last = first.id
        assert await channel.read(run_a, last, 0.5) == []  # subscribed: the tail is up to date
        before = len(reads)
        received: list[Any] = []
        for n in range(1, 4):
            reader = asyncio.create_task(channel.read(run_a, last, 20.0))
            await asyncio.sleep(0.05)
            await asyncio.to_thread(publish, run_a, ROUND, {"round": {"round": n}})
            events = await asyncio.wait_for(reader, 5.0)
            received.extend(e.data for e in events)
            last = events[-1].id
        await channel.aclose()
        return received, len(reads) - before

    received, table_reads = asyncio.run(scenario())
    wake.close()
    assert received == [{"round": {"round": n}} for n in range(1, 4)]
    assert table_reads == 0


@pytest.mark.deployments("production")
def test_a_gap_before_carried_events_and_a_bare_wake_up_read_the_table(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    """An event whose wake-up was lost, then one whose wake-up carries it: the reader reads the
    table and gets both in order; an event too large to carry comes through the table as well."""
    run_a = insert_run(session_factory)
    listener = RedisWakeListener(settings.redis_url, settings.redis_key_prefix, fallback_poll_s=30.0)
    channel = OutboxChannel(session_factory, listener)
    wake = RedisWake(settings.redis_url, settings.redis_key_prefix)
    lost, carried = publisher(session_factory, NoWake()), publisher(session_factory, wake)
    large = {"round": {"round": 2}, "padding": "x" * (MAX_CARRIED_BYTES + 1)}

    async def scenario() -> list[Any]:
        last = await channel.head(run_a)
        assert await channel.read(run_a, last, 0.5) == []  # subscribed
        reader = asyncio.create_task(channel.read(run_a, last, 20.0))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(lost, run_a, ROUND, {"round": {"round": 0}})
        await asyncio.to_thread(carried, run_a, ROUND, {"round": {"round": 1}})
        events = await asyncio.wait_for(reader, 5.0)
        while len(events) < 2:
            events += await asyncio.wait_for(channel.read(run_a, events[-1].id, 20.0), 5.0)
        reader = asyncio.create_task(channel.read(run_a, events[-1].id, 20.0))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(carried, run_a, ROUND, large)
        events += await asyncio.wait_for(reader, 5.0)
        await channel.aclose()
        return [e.data["round"]["round"] for e in events]

    assert asyncio.run(scenario()) == [0, 1, 2]
    wake.close()
