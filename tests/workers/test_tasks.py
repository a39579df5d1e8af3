"""run_experiment: an idempotent adapter from a run id to execute_run (run in-process here)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import RoundMetric
from backend.runtime.dispatch_ledger import DispatchLedger
from backend.settings import Settings
from tests.backend.builders import stored_events
from tests.workers.builders import add_run, get_run
from workers.context import close_worker_context, get_worker_settings
from workers.tasks import claimant_name, run_experiment

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


@pytest.fixture
def worker_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """This process acts as a worker process configured by the environment, like a real one."""
    monkeypatch.setenv("COLLAPIPE_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("COLLAPIPE_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("COLLAPIPE_ARTIFACT_DIR", str(settings.artifact_dir))
    monkeypatch.setenv("COLLAPIPE_LEASE_S", "5")
    monkeypatch.setenv("COLLAPIPE_REDIS_KEY_PREFIX", settings.redis_key_prefix)
    get_worker_settings.cache_clear()
    close_worker_context()
    yield get_worker_settings()
    close_worker_context()
    get_worker_settings.cache_clear()


def _deliver(run_id: int, task_id: str) -> str:
    outcome: str = run_experiment.apply(args=(run_id,), task_id=task_id).get()
    return outcome


def _rounds(factory: sessionmaker[Session], run_id: int) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).where(RoundMetric.run_id == run_id)) or 0)


def test_a_delivered_run_is_executed_and_its_mark_cleared(
    worker_env: Settings, session_factory: sessionmaker[Session]
) -> None:
    run_id = add_run(session_factory, rounds=4)
    client = redis.Redis.from_url(worker_env.redis_url, decode_responses=True)
    ledger = DispatchLedger(client, prefix=worker_env.redis_key_prefix)
    ledger.mark(run_id, "task-1")
    assert _deliver(run_id, "task-1") == "succeeded"
    assert ledger.unmarked([run_id]) == [run_id]
    ledger.close()
    run = get_run(session_factory, run_id)
    assert (run.status, run.rounds_done, run.attempt, run.lease_owner) == ("succeeded", 4, 1, None)
    assert _rounds(session_factory, run_id) == 4
    statuses = [data["status"] for kind, data in stored_events(session_factory, run_id) if kind == "status"]
    assert statuses == ["running", "succeeded"]
    assert run.checkpoint == "checkpoint-a1-r4.pt"  # the attempt's last checkpoint, named by the row
    assert (worker_env.artifact_dir / f"run-{run_id}" / run.checkpoint).is_file()


def test_a_duplicate_delivery_changes_nothing(
    worker_env: Settings, session_factory: sessionmaker[Session]
) -> None:
    run_id = add_run(session_factory, rounds=3)
    assert _deliver(run_id, "task-1") == "succeeded"
    before = stored_events(session_factory, run_id)
    assert _deliver(run_id, "task-1-again") == "skipped"
    assert _rounds(session_factory, run_id) == 3
    assert get_run(session_factory, run_id).attempt == 1
    assert stored_events(session_factory, run_id) == before


def test_a_run_leased_by_a_live_worker_is_skipped(
    worker_env: Settings, session_factory: sessionmaker[Session]
) -> None:
    run_id = add_run(session_factory, status="running", lease_owner="other:1:t", lease_in_s=30)
    assert _deliver(run_id, "task-2") == "skipped"
    run = get_run(session_factory, run_id)
    assert (run.status, run.lease_owner, run.rounds_done) == ("running", "other:1:t", 0)


def test_a_run_whose_lease_expired_is_taken_over(
    worker_env: Settings, session_factory: sessionmaker[Session]
) -> None:
    run_id = add_run(session_factory, status="running", lease_owner="dead:1:t", lease_in_s=-1, attempt=1)
    assert _deliver(run_id, "task-3") == "succeeded"
    run = get_run(session_factory, run_id)
    assert (run.status, run.attempt, run.rounds_done) == ("succeeded", 2, 4)


def test_the_claimant_names_host_process_and_task_and_is_unique_per_execution() -> None:
    first, second = claimant_name("run-1-attempt-1-abc"), claimant_name("run-1-attempt-1-abc")
    assert first.startswith(f"{socket.gethostname()}:{os.getpid()}:run-1-attempt-1-abc:")
    assert first != second  # a redelivered message keeps its task id; the lease token must differ


def test_a_run_that_finishes_while_redis_is_down_is_reported_as_it_ended(
    worker_env: Settings,
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis goes away during the run: the task still returns the run's outcome (the database has it
    succeeded), and the log says what did not happen (the dispatch mark), not that the task failed."""
    run_id = add_run(session_factory, rounds=3)
    monkeypatch.setenv("COLLAPIPE_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    get_worker_settings.cache_clear()
    close_worker_context()
    with caplog.at_level(logging.INFO, logger="workers.tasks"):
        assert _deliver(run_id, "task-redis-down") == "succeeded"
    assert get_run(session_factory, run_id).status == "succeeded"
    messages = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "workers.tasks"]
    assert any(
        level == "WARNING" and "dispatch mark of task task-redis-down not cleared" in message
        for level, message in messages
    ), messages
    assert ("INFO", f"run {run_id} (task task-redis-down, redelivered=None): succeeded") in messages
    assert not [message for level, message in messages if level == "ERROR"]
