"""Waking live readers after a commit that appended outbox events.

The outbox table is the live stream; a wake-up only tells readers to read it now instead of at their
next poll. A lost wake-up (a crash right after the commit, Redis down) costs latency, never an event:
readers also poll (``backend.live.outbox``).

- ``NoWake`` / ``PollWaiter``: the embedded default (readers poll the table every
  ``sse_poll_interval_s``).
- ``RedisWake`` / ``RedisWakeListener`` (backend.runtime.redis_wake): ``PUBLISH <prefix>live:wake``
  after each commit; every API process subscribes and reads the table at once.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Wake(Protocol):
    def notify(self, key: object) -> None:
        """Tell readers that events were committed (``key``: the round index or status, for logs and
        crash injection). Never raises."""


class NoWake:
    def notify(self, key: object) -> None:
        pass


class Waiter(Protocol):
    """What a reader of the outbox waits on between reads of the table."""

    def generation(self) -> int:
        """A counter that moves when a wake-up arrives."""

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        """Return when the generation moved past ``seen_generation`` or after ``timeout_s``."""


class PollWaiter:
    """No wake-ups: sleep ``interval_s`` between reads."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s

    def generation(self) -> int:
        return 0

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        await asyncio.sleep(min(timeout_s, self.interval_s))
