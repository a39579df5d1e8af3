"""The reaper: stale running runs go back to the queue; queued runs whose message was lost are resent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import Run, Study
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.lifecycle import RunStore
from backend.settings import Settings
from tests.backend.builders import stored_events
from tests.backend.runtime.test_lifecycle import Wakes
from tests.workers.builders import add_run, get_run
from workers.reaper import Reaper, run_forever

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


@pytest.fixture
def reaper(settings: Settings, session_factory: sessionmaker[Session]) -> Iterator[Reaper]:
    dispatcher = CeleryRunExecutor.from_settings(settings, session_factory)
    yield Reaper(RunStore(session_factory, Wakes()), dispatcher)
    dispatcher.app.close()
    dispatcher.redis.close()


def _sent(settings: Settings) -> list[int]:
    """Run ids of the messages waiting in the run queue, oldest first."""
    import base64

    client: Any = redis.Redis.from_url(settings.redis_url)
    raw = client.lrange(settings.redis_key_prefix + settings.run_queue, 0, -1)
    client.close()
    return [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in reversed(raw)]


def test_a_run_whose_lease_expired_is_requeued_announced_and_sent(
    reaper: Reaper, session_factory: sessionmaker[Session], settings: Settings
) -> None:
    stale = add_run(session_factory, status="running", lease_owner="dead:1:t", lease_in_s=-2, rounds_done=2)
    live = add_run(session_factory, status="running", lease_owner="alive:1:t", lease_in_s=30)
    report = reaper.sweep()
    assert (report.requeued, report.resent) == ([stale], [])
    assert get_run(session_factory, stale).status == "queued"
    assert get_run(session_factory, live).status == "running"
    assert _sent(settings) == [stale]
    [(kind, data)] = stored_events(session_factory, stale)
    assert (kind, data["status"], data["rounds_done"]) == ("status", "queued", 2)
    assert isinstance(reaper.store.wake, Wakes) and reaper.store.wake.keys == ["queued"]


def test_a_queued_run_without_a_message_is_resent_on_the_second_sweep(
    reaper: Reaper, session_factory: sessionmaker[Session], settings: Settings
) -> None:
    lost = add_run(session_factory)  # committed, but its enqueue never happened
    waiting = add_run(session_factory)
    reaper.dispatcher.enqueue(waiting)
    assert reaper.sweep().resent == []  # first sighting: maybe an enqueue in progress
    assert reaper.sweep().resent == [lost]
    assert _sent(settings) == [waiting, lost]
    assert reaper.sweep().resent == []  # marked now


def test_a_deferred_run_of_a_full_study_waits_without_messages_until_a_slot_frees(
    reaper: Reaper, session_factory: sessionmaker[Session], settings: Settings
) -> None:
    with session_factory() as session:
        study = Study(name="s", definition={}, cells=[], concurrency=1)
        session.add(study)
        session.commit()
    running = add_run(
        session_factory, status="running", lease_owner="alive:1:t", lease_in_s=30, study_id=study.id
    )
    deferred = add_run(session_factory, study_id=study.id)  # its claim was refused: no message
    assert reaper.sweep().resent == [] and reaper.sweep().resent == []  # the study is full
    assert _sent(settings) == []
    with session_factory() as session:  # the worker that ran it died after finishing, before sending
        session.execute(update(Run).where(Run.id == running).values(status="succeeded", lease_owner=None))
        session.commit()
    assert reaper.sweep().resent == []
    assert reaper.sweep().resent == [deferred]
    assert _sent(settings) == [deferred]


def test_finished_runs_are_left_alone(
    reaper: Reaper, session_factory: sessionmaker[Session], settings: Settings
) -> None:
    for status in ("succeeded", "failed", "cancelled"):
        add_run(session_factory, status=status)
    reaper.sweep()
    assert reaper.sweep() == type(reaper.sweep())([], [])
    assert _sent(settings) == []


def test_the_loop_survives_a_failing_sweep(reaper: Reaper, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    stop = threading.Event()

    def flaky_sweep() -> Any:
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        raise ConnectionError("database down")

    monkeypatch.setattr(reaper, "sweep", flaky_sweep)
    run_forever(reaper, 0.01, stop)
    assert len(calls) == 3
