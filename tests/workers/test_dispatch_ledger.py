"""The dispatch ledger: which queued runs have a message waiting in the broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from backend.runtime.dispatch_ledger import DispatchLedger, dispatch_key

pytestmark = pytest.mark.redis


@pytest.fixture
def ledger(redis_url: str, redis_prefix: str) -> Iterator[DispatchLedger]:
    ledger = DispatchLedger(
        redis.Redis.from_url(redis_url, decode_responses=True), ttl_s=60, prefix=redis_prefix
    )
    yield ledger
    ledger.close()


def test_marked_runs_are_not_reported_unmarked(ledger: DispatchLedger) -> None:
    ledger.mark(1, "t1")
    ledger.mark(3, "t3")
    assert ledger.unmarked([1, 2, 3, 4]) == [2, 4]
    assert ledger.unmarked([]) == []


def test_clear_removes_only_the_mark_of_the_same_task(ledger: DispatchLedger) -> None:
    ledger.mark(1, "old")
    ledger.mark(1, "new")  # a newer message for the same run
    ledger.clear(1, "old")  # a late duplicate of the old message is taken
    assert ledger.unmarked([1]) == []
    ledger.clear(1, "new")
    assert ledger.unmarked([1]) == [1]


def test_a_mark_expires(ledger: DispatchLedger) -> None:
    ledger.mark(5, "t")
    assert 0 < ledger.client.ttl(dispatch_key(5, ledger.prefix)) <= 60
