"""The composition root: what runs a service's runs and carries their live events, from settings.

- ``executor = "local"`` (embedded default): the runs table is the queue and ``LocalDispatcher``
  spawns one process per run in this process; live readers poll the outbox table.
- ``executor = "celery"``: ``CeleryRunExecutor`` sends each run to the Celery workers over Redis;
  commits wake live readers through Redis pub/sub (``RedisWake``/``RedisWakeListener``).

Either way the live channel is the outbox (``OutboxChannel``): the same event ids, the same
exactly-once resume. The worker processes build their side in ``workers.context``.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.db.engine import SessionFactory
from backend.live.outbox import OutboxChannel
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.dispatch import RunDispatcher
from backend.runtime.lifecycle import RunStore
from backend.runtime.local import LocalDispatcher
from backend.runtime.redis_wake import RedisWake, RedisWakeListener
from backend.runtime.wake import NoWake, PollWaiter, Wake
from backend.settings import Settings


@dataclass
class Runtime:
    dispatcher: RunDispatcher
    channel: OutboxChannel
    wake: Wake  # what the API's own transitions (create, cancel, resume) call after their commit

    async def aclose(self) -> None:
        await self.channel.aclose()
        if isinstance(self.wake, RedisWake):
            self.wake.close()


def build_runtime(
    settings: Settings, session_factory: SessionFactory, dispatcher: RunDispatcher | None = None
) -> Runtime:
    """The deployment's runtime; ``dispatcher`` replaces its executor (tests hold runs with one)."""
    if settings.executor == "local":
        channel = OutboxChannel(session_factory, PollWaiter(settings.sse_poll_interval_s))
        local = dispatcher or LocalDispatcher(settings, RunStore(session_factory))
        return Runtime(local, channel, NoWake())
    listener = RedisWakeListener(settings.redis_url, settings.redis_key_prefix)
    return Runtime(
        dispatcher or CeleryRunExecutor.from_settings(settings, session_factory),
        OutboxChannel(session_factory, listener),
        RedisWake(settings.redis_url, settings.redis_key_prefix),
    )
