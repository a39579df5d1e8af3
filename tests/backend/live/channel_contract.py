"""The LiveChannel contract (backend/live/channel.py), as checks the outbox channel must pass in
both deployments.

Each ``check_*`` takes a fresh channel, a ``Publish`` that writes one event the way the lifecycle
does (appended to the outbox in a transaction, committed, readers woken) and returns its id, and two
run ids that exist; it raises AssertionError on a violation. test_outbox.py runs them on SQLite
with polling readers and on PostgreSQL with Redis wake-ups.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from backend.live.channel import ROUND, STATUS, LiveChannel, LiveEvent

Publish = Callable[[int, str, dict[str, Any]], str]


def status_payload(run_id: int, status: str, done: int, total: int, error: str | None) -> dict[str, Any]:
    return {"run_id": run_id, "status": status, "rounds_done": done, "total_rounds": total, "error": error}


def _read(
    channel: LiveChannel, run_id: int | None, after: str | None, block_s: float = 0.0
) -> list[LiveEvent]:
    async def go() -> list[LiveEvent]:
        return await channel.read(run_id, after, block_s)

    return anyio.run(go)


def _head(channel: LiveChannel, run_id: int | None) -> str:
    async def go() -> str:
        return await channel.head(run_id)

    return anyio.run(go)


def check_replay_in_order(channel: LiveChannel, publish: Publish, run_a: int, run_b: int) -> None:
    ids = [publish(run_a, ROUND, {"round": {"round": r}}) for r in range(5)]
    publish(run_b, ROUND, {"round": {"round": 0}})
    events = _read(channel, run_a, None)
    assert [e.id for e in events] == ids
    assert [e.data["round"]["round"] for e in events] == [0, 1, 2, 3, 4]
    assert {e.run_id for e in events} == {run_a} and {e.kind for e in events} == {ROUND}


def check_resume_after_an_id_misses_nothing(
    channel: LiveChannel, publish: Publish, run_a: int, run_b: int
) -> None:
    ids = [publish(run_a, ROUND, {"round": {"round": r}}) for r in range(6)]
    assert [e.id for e in _read(channel, run_a, ids[2])] == ids[3:]
    assert _read(channel, run_a, ids[-1]) == []


def check_head_is_the_latest_id(channel: LiveChannel, publish: Publish, run_a: int, run_b: int) -> None:
    assert _head(channel, run_a) == "0" and _head(channel, None) == "0"
    publish(run_a, ROUND, {"round": {"round": 0}})
    last = publish(run_a, STATUS, status_payload(run_a, "running", 1, 5, None))
    assert _head(channel, run_a) == last
    assert _read(channel, run_a, _head(channel, run_a)) == []


def check_status_events_feed_the_all_runs_stream(
    channel: LiveChannel, publish: Publish, run_a: int, run_b: int
) -> None:
    publish(run_a, ROUND, {"round": {"round": 0}})
    first = publish(run_a, STATUS, status_payload(run_a, "running", 0, 5, None))
    second = publish(run_b, STATUS, status_payload(run_b, "queued", 0, 5, None))
    events = _read(channel, None, None)
    assert [(e.id, e.run_id, e.data["status"]) for e in events] == [
        (first, run_a, "running"),
        (second, run_b, "queued"),
    ]
    assert [e.id for e in _read(channel, None, first)] == [second]


def check_read_blocks_until_an_event_arrives(
    channel: LiveChannel, publish: Publish, run_a: int, run_b: int
) -> None:
    published: list[str] = []
    timer = threading.Timer(0.3, lambda: published.append(publish(run_a, ROUND, {"round": {"round": 0}})))
    timer.start()
    try:
        started = time.monotonic()
        events = _read(channel, run_a, None, block_s=5.0)
        assert time.monotonic() - started < 4.0
    finally:
        timer.join()  # the reader may wake before publish() returns its id
    assert [e.id for e in events] == published
    started = time.monotonic()
    assert _read(channel, run_a, published[0], block_s=0.2) == []
    assert time.monotonic() - started >= 0.15


def check_a_malformed_id_is_refused(channel: LiveChannel, publish: Publish, run_a: int, run_b: int) -> None:
    with pytest.raises(ValueError, match="not an id of this stream"):
        _read(channel, run_a, "not-an-id")


def check_payloads_round_trip(channel: LiveChannel, publish: Publish, run_a: int, run_b: int) -> None:
    payload: dict[str, Any] = {
        "round": {"round": 0, "latency_s": 0.5, "eval_loss": None, "violations": ["x"]}
    }
    publish(run_a, ROUND, payload)
    assert _read(channel, run_a, None)[0].data == payload


CHECKS: list[Callable[[LiveChannel, Publish, int, int], None]] = [
    check_replay_in_order,
    check_resume_after_an_id_misses_nothing,
    check_head_is_the_latest_id,
    check_status_events_feed_the_all_runs_stream,
    check_read_blocks_until_an_event_arrives,
    check_a_malformed_id_is_refused,
    check_payloads_round_trip,
]
