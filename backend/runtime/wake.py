"""Waking live readers after a commit that appended outbox events.

The outbox table is the live stream; a wake-up tells readers that events were committed, and may
carry those committed events so that a reader that has seen every earlier one delivers them without
reading the table. A lost wake-up (a crash right after the commit, Redis down) costs latency, never
an event: readers also poll (``backend.live.outbox``).

- ``NoWake`` / ``PollWaiter``: the embedded default (readers poll the table every
  ``sse_poll_interval_s``).
- ``RedisWake`` / ``RedisWakeListener`` (backend.runtime.redis_wake): ``PUBLISH <prefix>live:wake``
  with the committed events after each commit; every API process subscribes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from backend.live.channel import LiveEvent


class Wake(Protocol):
    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        """Tell readers that ``events`` (one transaction's, in id order) were committed (``key``: the
        round index or status, for logs and crash injection). Never raises."""


class NoWake:
    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        pass


class Waiter(Protocol):
    """What a reader of the outbox waits on between reads of the table."""

    def generation(self) -> int:
        """A counter that moves when a wake-up arrives."""

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        """Return when the generation moved past ``seen_generation`` or after ``timeout_s``."""

    def take_events(self) -> list[LiveEvent] | None:
        """The events carried by the wake-ups since the last call, in arrival order (each
        transaction's in id order); None when a wake-up came without them (too large to carry, or
        the subscription was re-established), so the reader reads the table."""


class PollWaiter:
    """No wake-ups: sleep ``interval_s`` between reads."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s

    def generation(self) -> int:
        return 0

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        await asyncio.sleep(min(timeout_s, self.interval_s))

    def take_events(self) -> list[LiveEvent] | None:
        return None
