"""The Redis Stream live channel: ordered replay, resume after an id, the status stream, trimming."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from backend.live.channel import ROUND, STATUS, LiveChannel, status_payload
from tests.backend.live.channel_contract import CHECKS
from workers.redis_channel import STATUS_STREAM, RedisStreamChannel, parse_stream_id, run_stream

pytestmark = pytest.mark.redis


@pytest.fixture
def channel(redis_url: str, redis_prefix: str) -> Iterator[RedisStreamChannel]:
    channel = RedisStreamChannel(redis_url, maxlen=100, ttl_s=60, prefix=redis_prefix)
    yield channel
    channel.close()


def _read(channel: RedisStreamChannel, run_id: int | None, after: str | None, block_s: float = 0.0) -> Any:
    async def go() -> Any:
        try:
            return await channel.read(run_id, after, block_s)
        finally:
            await channel.aclose()

    return asyncio.run(go())


def test_events_come_back_in_publish_order_with_their_ids(channel: RedisStreamChannel) -> None:
    ids = [channel.publish(7, ROUND, {"round": {"round": r}}) for r in range(5)]
    events = _read(channel, 7, None)
    assert [e.id for e in events] == ids
    assert [e.data["round"]["round"] for e in events] == list(range(5))
    assert {(e.run_id, e.kind) for e in events} == {(7, ROUND)}


def test_reading_after_an_id_resumes_exactly_there(channel: RedisStreamChannel) -> None:
    ids = [channel.publish(7, ROUND, {"n": n}) for n in range(10)]
    events = _read(channel, 7, ids[3])
    assert [e.data["n"] for e in events] == list(range(4, 10))
    assert _read(channel, 7, ids[-1]) == []


def test_runs_have_separate_streams(channel: RedisStreamChannel) -> None:
    channel.publish(1, ROUND, {"n": 1})
    channel.publish(2, ROUND, {"n": 2})
    assert [e.data["n"] for e in _read(channel, 2, None)] == [2]


def test_status_events_also_feed_the_all_runs_stream(channel: RedisStreamChannel, redis_url: str) -> None:
    channel.publish(1, STATUS, status_payload(1, "running", 0, 3, None))
    channel.publish(1, ROUND, {"n": 0})
    channel.publish(2, STATUS, status_payload(2, "queued", 0, 5, None))
    everything = _read(channel, None, None)
    assert [(e.run_id, e.data["status"]) for e in everything] == [(1, "running"), (2, "queued")]
    assert [e.kind for e in _read(channel, 1, None)] == [STATUS, ROUND]
    client: Any = redis.Redis.from_url(redis_url)
    assert client.xlen(channel.prefix + STATUS_STREAM) == 2
    client.close()


def test_head_is_the_latest_id_or_zero(channel: RedisStreamChannel) -> None:
    async def head(run_id: int | None) -> str:
        try:
            return await channel.head(run_id)
        finally:
            await channel.aclose()

    assert asyncio.run(head(3)) == "0"
    assert asyncio.run(head(None)) == "0"
    last = [channel.publish(3, ROUND, {"n": n}) for n in range(3)][-1]
    assert asyncio.run(head(3)) == last
    assert _read(channel, 3, asyncio.run(head(3))) == []


def test_a_blocked_reader_wakes_up_on_publish(channel: RedisStreamChannel) -> None:
    async def scenario() -> tuple[list[Any], float]:
        try:
            start = time.monotonic()
            reader = asyncio.create_task(channel.read(4, "0", 5.0))
            await asyncio.sleep(0.2)
            await asyncio.to_thread(channel.publish, 4, ROUND, {"n": 1})
            events = await reader
            return events, time.monotonic() - start
        finally:
            await channel.aclose()

    events, waited_s = asyncio.run(scenario())
    assert [e.data for e in events] == [{"n": 1}]
    assert waited_s < 4.0  # woke on the publish, not at the 5 s block limit


def test_an_empty_read_waits_at_most_block_s(channel: RedisStreamChannel) -> None:
    start = time.monotonic()
    assert _read(channel, 5, None, block_s=0.3) == []
    assert time.monotonic() - start >= 0.25


@pytest.mark.parametrize("bad", ["abc", "1-2-3", "-1", "1.5", "", "12-x"])
def test_a_malformed_id_is_refused_before_waiting(channel: RedisStreamChannel, bad: str) -> None:
    start = time.monotonic()
    with pytest.raises(ValueError, match="not an id of this stream"):
        _read(channel, 1, bad, block_s=5.0)
    assert time.monotonic() - start < 1.0


def test_parse_stream_id_accepts_redis_ids() -> None:
    assert parse_stream_id(None) == "0"
    assert parse_stream_id("0") == "0"
    assert parse_stream_id("1700000000000-3") == "1700000000000-3"


def test_a_stream_keeps_about_maxlen_events_and_expires(channel: RedisStreamChannel, redis_url: str) -> None:
    for n in range(1000):
        channel.publish(9, ROUND, {"n": n})
    client: Any = redis.Redis.from_url(redis_url)
    kept = client.xlen(run_stream(9, channel.prefix))
    ttl = client.ttl(run_stream(9, channel.prefix))
    client.close()
    assert 100 <= kept < 1000  # MAXLEN ~ trims whole macro-nodes: about maxlen, never fewer
    assert 0 < ttl <= 60
    events = _read(channel, 9, None)
    assert [e.data["n"] for e in events] == list(range(1000 - kept, 1000))  # the newest, in order


def test_payloads_round_trip_as_json(channel: RedisStreamChannel) -> None:
    data = {"round": {"round": 0, "eval_metrics": {"acc": 0.5}, "violations": ["x"]}, "devices": [{"a": 1}]}
    channel.publish(11, ROUND, data)
    assert _read(channel, 11, None)[0].data == data


def test_sync_close_inside_the_loop_leaves_no_open_connection(channel: RedisStreamChannel) -> None:
    """The app's lifespan calls ``close()`` (sync) from its event loop; nothing may leak (-W error)."""
    import gc

    async def scenario() -> None:
        channel.publish(12, ROUND, {"n": 0})
        assert len(await channel.read(12, None, 0.0)) == 1
        channel.close()

    asyncio.run(scenario())
    gc.collect()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_the_live_channel_contract(
    check: Callable[[LiveChannel, int, int], None], redis_url: str, redis_prefix: str
) -> None:
    """The backend's LiveChannel contract, the same checks MemoryChannel and DbEventChannel pass."""
    channel = RedisStreamChannel(redis_url, prefix=redis_prefix)
    try:
        check(channel, 1, 2)
    finally:
        channel.close()


def test_ids_increase_across_all_streams(channel: RedisStreamChannel) -> None:
    """One id sequence for every stream: a status event has the same id on both of its streams."""
    ids = [
        channel.publish(run_id, kind, {"n": n})
        for n, (run_id, kind) in enumerate([(1, ROUND), (2, ROUND)] * 50)
    ]
    as_tuples = [tuple(int(part) for part in i.split("-")) for i in ids]
    assert as_tuples == sorted(set(as_tuples))


def test_a_prefix_keeps_deployments_apart(redis_url: str, redis_prefix: str) -> None:
    ours = RedisStreamChannel(redis_url, prefix=redis_prefix + "a:")
    theirs = RedisStreamChannel(redis_url, prefix=redis_prefix + "b:")
    try:
        ours.publish(1, STATUS, status_payload(1, "running", 0, 1, None))
        assert _read(theirs, 1, None) == [] and _read(theirs, None, None) == []
        assert len(_read(ours, None, None)) == 1
    finally:
        ours.close()
        theirs.close()


def test_a_round_is_on_the_stream_at_most_once(channel: RedisStreamChannel) -> None:
    assert channel.last_published_round(7) == -1
    first = channel.publish_round(7, 0, {"round": {"round": 0}})
    assert first is not None
    assert channel.publish_round(7, 0, {"round": {"round": 0}}) is None  # a retry: refused
    channel.publish(7, STATUS, status_payload(7, "running", 1, 3, None))  # other kinds are not counted
    assert channel.publish_round(7, 2, {"round": {"round": 2}}) is not None
    assert channel.publish_round(7, 1, {"round": {"round": 1}}) is None  # behind the mark: refused
    assert channel.last_published_round(7) == 2 and channel.last_published_round(8) == -1
    assert [e.kind for e in _read(channel, 7, None)] == [ROUND, STATUS, ROUND]
    with pytest.raises(ValueError, match="round_index=-1"):
        channel.publish_round(7, -1, {})
