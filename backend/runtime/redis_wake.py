"""Live wake-ups through Redis: writers ``PUBLISH <prefix>live:wake`` after a commit that appended
outbox events; each API process subscribes once per event loop.

A message carries the committed events (JSON ``[[id, run_id, kind, data], ...]``, in id order) unless
they exceed ``MAX_CARRIED_BYTES`` (then it is empty): the outbox tail delivers carried events that
directly follow the newest id it has and reads the table otherwise. Readers still read the table at
least every ``FALLBACK_POLL_S``: a lost wake-up (a crash right after the commit, Redis restarting)
delays an event, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import Sequence

import redis
import redis.asyncio as aioredis

from backend.live.channel import LiveEvent
from collapipe_core.faults import crash_point

log = logging.getLogger(__name__)

WAKE_CHANNEL = "live:wake"
FALLBACK_POLL_S = 1.0  # with Redis wake-ups, readers still read the table this often
RECONNECT_S = 1.0
MAX_CARRIED_BYTES = 256 * 1024  # larger transactions send a bare wake-up; readers read the table
MAX_PENDING_EVENTS = 5000  # carried events not yet taken by the tail; beyond, it reads the table


def encode_events(events: Sequence[LiveEvent]) -> bytes:
    """The wake-up message for one transaction's events (empty: too large to carry, or none)."""
    try:
        body = json.dumps(
            [[int(e.id), e.run_id, e.kind, e.data] for e in events], separators=(",", ":"), allow_nan=False
        ).encode()
    except (TypeError, ValueError):  # not plain JSON: readers read the table
        return b""
    return body if events and len(body) <= MAX_CARRIED_BYTES else b""


def decode_events(message: bytes) -> list[LiveEvent] | None:
    """The events a wake-up carries; None for a bare or unreadable one (readers read the table)."""
    if not message:
        return None
    try:
        return [LiveEvent(str(i), run_id, kind, data) for i, run_id, kind, data in json.loads(message)]
    except (TypeError, ValueError):
        return None


class RedisWake:
    def __init__(self, redis_url: str, prefix: str = "", timeout_s: float = 2.0) -> None:
        self.channel = prefix + WAKE_CHANNEL
        self._client = redis.Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        crash_point("relay-publish", key)
        try:
            self._client.publish(self.channel, encode_events(events))
        except redis.RedisError as err:  # readers find the events at their next poll
            log.warning(
                "live wake-up not sent (%s); readers see the events within %.0f s", err, FALLBACK_POLL_S
            )

    def close(self) -> None:
        self._client.close()


class RedisWakeListener:
    """Subscribes to the wake channel (one connection per event loop) and counts wake-ups."""

    def __init__(self, redis_url: str, prefix: str = "", fallback_poll_s: float = FALLBACK_POLL_S) -> None:
        self.redis_url = redis_url
        self.channel = prefix + WAKE_CHANNEL
        self.fallback_poll_s = fallback_poll_s
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Subscription] = (
            weakref.WeakKeyDictionary()
        )

    def _subscription(self) -> _Subscription:
        loop = asyncio.get_running_loop()
        sub = self._loops.get(loop)
        if sub is None:
            sub = self._loops[loop] = _Subscription(self.redis_url, self.channel)
        return sub

    def generation(self) -> int:
        return self._subscription().generation

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        await self._subscription().wait(seen_generation, min(timeout_s, self.fallback_poll_s))

    def take_events(self) -> list[LiveEvent] | None:
        return self._subscription().take_events()

    async def aclose(self) -> None:
        current = asyncio.get_running_loop()
        sub = self._loops.pop(current, None)
        if sub is not None:
            await sub.aclose()


class _Subscription:
    def __init__(self, redis_url: str, channel: str) -> None:
        self.redis_url = redis_url
        self.channel = channel
        self.generation = 0
        self._changed = asyncio.Event()
        self._carried: list[LiveEvent] = []
        self._complete = False  # False: some wake-up since the last take carried no events
        self._task = asyncio.create_task(self._listen(), name="collapipe-live-wake")

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        if self.generation != seen_generation:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    def take_events(self) -> list[LiveEvent] | None:
        carried, complete = self._carried, self._complete
        self._carried, self._complete = [], True
        return carried if complete else None

    def _woken(self, carried: list[LiveEvent] | None) -> None:
        if carried is None or len(self._carried) + len(carried) > MAX_PENDING_EVENTS:
            self._carried, self._complete = [], False
        elif self._complete:
            self._carried.extend(carried)
        self.generation += 1
        self._changed.set()
        self._changed = asyncio.Event()  # waiters hold the set one; later ones get a fresh one

    async def _listen(self) -> None:
        while True:
            # no socket timeout: a subscription waits as long as nothing is published (redis-py's
            # default would cut it after 5 s); keep-alives find a dead connection
            client = aioredis.Redis.from_url(
                self.redis_url, socket_connect_timeout=2.0, socket_timeout=None, socket_keepalive=True
            )
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    self._woken(None)  # (re)subscribed: the table is read for what came meanwhile
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._woken(decode_events(message.get("data") or b""))
            except asyncio.CancelledError:
                raise
            except Exception as err:  # Redis restarting: readers keep polling meanwhile
                log.warning("live wake-ups: subscription to %s lost (%s); retrying", self.channel, err)
                await asyncio.sleep(RECONNECT_S)
            finally:
                await client.aclose()

    async def aclose(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
