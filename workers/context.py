"""What a worker process holds: settings, the engine, the run store (with its Redis wake-ups), the
dispatch ledger, the dispatcher that hands a study's deferred runs over, and the workspace.

Built lazily in the process that uses it and rebuilt after a fork (a SQLAlchemy engine's pooled
connections and a Redis client's sockets must never be shared between prefork children).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import redis
from sqlalchemy import Engine

from backend.db.engine import EXECUTOR_LIMITS, make_engine, make_session_factory
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.dispatch_ledger import DispatchLedger
from backend.runtime.lifecycle import RunStore
from backend.runtime.redis_wake import RedisWake
from backend.settings import Settings
from collapipe_core.workspace import Workspace


@lru_cache(maxsize=1)
def get_worker_settings() -> Settings:
    """The process's settings (read once from the environment, prefix ``COLLAPIPE_``)."""
    return Settings()


@dataclass
class WorkerContext:
    pid: int
    settings: Settings
    engine: Engine
    store: RunStore
    wake: RedisWake
    ledger: DispatchLedger
    dispatcher: CeleryRunExecutor  # sends with the worker's app and ledger (start_deferred)
    workspace: Workspace

    def close(self) -> None:
        self.wake.close()
        self.ledger.close()
        self.engine.dispose()


_context: WorkerContext | None = None


def worker_context() -> WorkerContext:
    """This process's context, created on first use (and again in a forked child)."""
    global _context
    if _context is None or _context.pid != os.getpid():
        from workers.celery_app import app  # the app imports this module for its settings

        settings = get_worker_settings()
        engine = make_engine(settings.database_url, EXECUTOR_LIMITS)
        factory = make_session_factory(engine)
        wake = RedisWake(settings.redis_url, settings.redis_key_prefix)
        client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
        ledger = DispatchLedger(
            client, ttl_s=2 * settings.visibility_timeout_s, prefix=settings.redis_key_prefix
        )
        _context = WorkerContext(
            pid=os.getpid(),
            settings=settings,
            engine=engine,
            store=RunStore(factory, wake),
            wake=wake,
            ledger=ledger,
            dispatcher=CeleryRunExecutor(
                app,
                factory,
                ledger,
                settings.run_queue,
                client,
                queue_key=settings.redis_key_prefix + settings.run_queue,
            ),
            workspace=settings.workspace(),
        )
    return _context


def close_worker_context() -> None:
    """Release the process's connections (a worker child shutting down)."""
    global _context
    if _context is not None and _context.pid == os.getpid():
        _context.close()
    _context = None
