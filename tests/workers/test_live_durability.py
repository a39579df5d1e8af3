"""The publish gap, closed: a round committed but not published (crash in between) still reaches a
client of the Redis Stream, exactly once and in order, once the run restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.db.models import RoundMetric, Run
from backend.jsonsafe import sanitize
from backend.live.channel import ROUND, STATUS, LiveEvent
from backend.runs.execution import execute_run
from backend.runs.sink import SqlRoundSink
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from collapipe_core.validation import parse_config
from tests.backend.builders import service_workspace
from tests.workers.builders import add_run, config_json
from workers.redis_channel import RedisStreamChannel

pytestmark = pytest.mark.redis

ROUNDS = 6
CRASH_ROUND = 2


class Crash(BaseException):
    """The process dies: nothing after this point runs (not an Exception, so nothing catches it)."""


class CrashBeforePublishing:
    """The Redis channel, except that the process 'dies' right before publishing round CRASH_ROUND
    (its transaction is committed by then)."""

    def __init__(self, channel: RedisStreamChannel) -> None:
        self.channel = channel

    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str:
        return self.channel.publish(run_id, kind, data)

    def publish_round(self, run_id: int, round_index: int, data: Mapping[str, Any]) -> str | None:
        if round_index == CRASH_ROUND:
            raise Crash
        return self.channel.publish_round(run_id, round_index, data)

    def last_published_round(self, run_id: int) -> int:
        return self.channel.last_published_round(run_id)

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]:
        return await self.channel.read(run_id, after, block_s)

    async def head(self, run_id: int | None) -> str:
        return await self.channel.head(run_id)

    def close(self) -> None:
        pass


@pytest.fixture
def channel(redis_url: str, redis_prefix: str) -> Iterator[RedisStreamChannel]:
    channel = RedisStreamChannel(redis_url, ttl_s=60, prefix=redis_prefix)
    yield channel
    channel.close()


def _stream(channel: RedisStreamChannel, run_id: int) -> list[LiveEvent]:
    """What a stream client reading from the start receives."""

    async def go() -> list[LiveEvent]:
        try:
            return await channel.read(run_id, None, 0.0)
        finally:
            await channel.aclose()

    return asyncio.run(go())


def _rounds(events: list[LiveEvent]) -> list[int]:
    return [e.data["round"]["round"] for e in events if e.kind == ROUND]


def _stored_rounds(factory: sessionmaker[Session], run_id: int) -> int:
    with factory() as session:
        query = select(func.count()).select_from(RoundMetric).where(RoundMetric.run_id == run_id)
        return int(session.scalar(query) or 0)


def _results(rounds: int) -> list[RoundResult]:
    sink = MemorySink()
    Runner(parse_config(config_json(rounds)), sink).run()
    return sink.results


def test_a_round_committed_but_not_published_reaches_the_stream_once_after_a_restart(
    session_factory: sessionmaker[Session], channel: RedisStreamChannel
) -> None:
    run_id = add_run(session_factory, status="running", rounds=ROUNDS, lease_owner="w1", lease_in_s=60)
    results = _results(ROUNDS)
    first = SqlRoundSink(session_factory, run_id, "w1", CrashBeforePublishing(channel), lease_s=60)
    with pytest.raises(Crash):
        for result in results:
            first.write_round(result)
    assert _stored_rounds(session_factory, run_id) == CRASH_ROUND + 1  # committed ...
    assert _rounds(_stream(channel, run_id)) == list(range(CRASH_ROUND))  # ... but not published

    # the restarted attempt resumes from the checkpoint before the crash: it re-runs CRASH_ROUND
    again = SqlRoundSink(session_factory, run_id, "w1", channel, lease_s=60)
    assert again.catch_up() == 1
    for result in results[CRASH_ROUND:]:
        again.write_round(result)
    assert again.catch_up() == 0  # a second catch-up (or a duplicate publisher) adds nothing

    events = _stream(channel, run_id)
    assert _rounds(events) == list(range(ROUNDS))  # every round, once, in order
    assert events[CRASH_ROUND].data == sanitize(results[CRASH_ROUND].to_json())  # rebuilt from the DB
    assert [e.data for e in events] == [sanitize(r.to_json()) for r in results]


def test_execute_run_after_a_crash_between_commit_and_publish(
    session_factory: sessionmaker[Session], channel: RedisStreamChannel, tmp_path: Path
) -> None:
    run_id = add_run(session_factory, rounds=ROUNDS)
    ws = service_workspace(tmp_path / "data")
    crashing = CrashBeforePublishing(channel)
    with pytest.raises(Crash):
        execute_run(
            run_id, session_factory, crashing, claimant="w1", artifact_dir=tmp_path, workspace=ws, lease_s=60
        )
    assert _rounds(_stream(channel, run_id)) == list(range(CRASH_ROUND))
    with session_factory() as session:  # the dead worker's lease runs out
        session.execute(
            update(Run).where(Run.id == run_id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
        session.commit()

    outcome = execute_run(
        run_id, session_factory, channel, claimant="w2", artifact_dir=tmp_path, workspace=ws, lease_s=60
    )

    assert outcome == "succeeded"
    events = _stream(channel, run_id)
    assert _rounds(events) == list(range(ROUNDS))
    statuses = [e.data["status"] for e in events if e.kind == STATUS]
    assert statuses == ["running", "running", "succeeded"]  # the crash published no final status
    assert events[-1].kind == STATUS  # every round arrives before the final status
