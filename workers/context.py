"""What a worker process holds: settings, the engine and session factory, the live channel.

Built lazily in the process that uses it and rebuilt after a fork (a SQLAlchemy engine's pooled
connections and a Redis client's sockets must never be shared between prefork children).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from backend.db.engine import SessionFactory, make_engine, make_session_factory
from collapipe_core.workspace import Workspace
from workers.dispatch_ledger import DispatchLedger
from workers.redis_channel import RedisStreamChannel, make_channel
from workers.settings import WorkerSettings, get_worker_settings


@dataclass
class WorkerContext:
    pid: int
    settings: WorkerSettings
    engine: Engine
    session_factory: SessionFactory
    channel: RedisStreamChannel
    ledger: DispatchLedger
    workspace: Workspace

    def close(self) -> None:
        self.channel.close()
        self.ledger.close()
        self.engine.dispose()


_context: WorkerContext | None = None


def worker_context() -> WorkerContext:
    """This process's context, created on first use (and again in a forked child)."""
    global _context
    if _context is None or _context.pid != os.getpid():
        settings = get_worker_settings()
        engine = make_engine(settings.database_url)
        _context = WorkerContext(
            pid=os.getpid(),
            settings=settings,
            engine=engine,
            session_factory=make_session_factory(engine),
            channel=make_channel(settings),
            ledger=DispatchLedger(
                redis.Redis.from_url(settings.redis_url, decode_responses=True),
                ttl_s=2 * settings.visibility_timeout_s,
                prefix=settings.redis_key_prefix,
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
