"""CeleryRunExecutor: sends run_experiment(run_id) with a readable task id and marks the run."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from backend.runtime.celery_app import RUN_TASK
from backend.runtime.celery_dispatch import CeleryRunExecutor, task_id_for
from backend.settings import Settings
from tests.workers.builders import add_run

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


@pytest.fixture
def executor(settings: Settings, session_factory: sessionmaker[Session]) -> Iterator[CeleryRunExecutor]:
    executor = CeleryRunExecutor.from_settings(settings, session_factory)
    yield executor
    executor.app.close()
    executor.redis.close()


def _messages(settings: Settings) -> list[dict[str, Any]]:
    client: Any = redis.Redis.from_url(settings.redis_url)
    raw = client.lrange(settings.redis_key_prefix + settings.run_queue, 0, -1)
    client.close()
    return [json.loads(m) for m in reversed(raw)]  # kombu LPUSHes; consumers BRPOP the other end


def test_enqueue_sends_the_run_id_with_a_task_id_naming_run_and_attempt(
    executor: CeleryRunExecutor, session_factory: sessionmaker[Session], settings: Settings
) -> None:
    run_id = add_run(session_factory, attempt=2)
    executor.enqueue(run_id)
    [message] = _messages(settings)
    assert message["headers"]["task"] == RUN_TASK
    assert message["headers"]["id"].startswith(f"run-{run_id}-attempt-3-")
    args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([run_id], {})
    assert executor.ledger.unmarked([run_id]) == []
    assert executor.queue_depth() == 1


def test_every_enqueue_is_a_distinct_message(executor: CeleryRunExecutor, session_factory: Any) -> None:
    run_id = add_run(session_factory)
    executor.enqueue(run_id)
    executor.enqueue(run_id)
    assert executor.queue_depth() == 2
    assert task_id_for(1, 1) != task_id_for(1, 1)


def test_ready_while_redis_answers(executor: CeleryRunExecutor) -> None:
    assert executor.check_ready() is None


def test_not_ready_without_redis(settings: Settings, session_factory: sessionmaker[Session]) -> None:
    unreachable = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    executor = CeleryRunExecutor.from_settings(unreachable, session_factory)
    problem = executor.check_ready()
    assert problem is not None and "unreachable" in problem
    assert executor.queue_depth() is None
    executor.redis.close()
