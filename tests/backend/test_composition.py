"""The composition root: the executor and the live wake-ups each deployment gets from its settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.composition import build_runtime
from backend.db.engine import make_engine, make_session_factory
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.local import LocalDispatcher
from backend.runtime.redis_wake import RedisWake, RedisWakeListener
from backend.runtime.wake import NoWake, PollWaiter
from backend.settings import Settings


def test_the_embedded_default_runs_locally_and_polls_the_outbox(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/c.db", sse_poll_interval_s=0.05, _env_file=None)
    engine = make_engine(settings.database_url)
    runtime = build_runtime(settings, make_session_factory(engine))
    assert isinstance(runtime.dispatcher, LocalDispatcher) and isinstance(runtime.wake, NoWake)
    waiter = runtime.channel.waiter
    assert isinstance(waiter, PollWaiter) and waiter.interval_s == 0.05
    engine.dispose()


def test_celery_sends_runs_to_the_workers_and_wakes_readers_through_redis(tmp_path: Path) -> None:
    """Builds clients only (nothing connects until used)."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/c.db",
        executor="celery",
        redis_url="redis://127.0.0.1:6379/12",
        redis_key_prefix="composition-test:",
        run_queue="q",
        _env_file=None,
    )
    engine = make_engine(settings.database_url)
    runtime = build_runtime(settings, make_session_factory(engine))
    dispatcher = runtime.dispatcher
    assert isinstance(dispatcher, CeleryRunExecutor) and dispatcher.queue == "q"
    assert isinstance(runtime.wake, RedisWake) and runtime.wake.channel == "composition-test:live:wake"
    listener = runtime.channel.waiter
    assert isinstance(listener, RedisWakeListener) and listener.channel == "composition-test:live:wake"
    asyncio.run(dispatcher.stop())
    asyncio.run(runtime.aclose())
    engine.dispose()
