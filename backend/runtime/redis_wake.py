"""Live wake-ups through Redis: writers ``PUBLISH <prefix>live:wake`` after a commit that appended
outbox events; each API process subscribes once per event loop and reads the table at once. Readers
still read the table at least every ``FALLBACK_POLL_S``: a lost wake-up (a crash right after the
commit, Redis restarting) delays an event, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref

import redis
import redis.asyncio as aioredis

from collapipe_core.faults import crash_point

log = logging.getLogger(__name__)

WAKE_CHANNEL = "live:wake"
FALLBACK_POLL_S = 1.0  # with Redis wake-ups, readers still read the table this often
RECONNECT_S = 1.0


class RedisWake:
    def __init__(self, redis_url: str, prefix: str = "", timeout_s: float = 2.0) -> None:
        self.channel = prefix + WAKE_CHANNEL
        self._client = redis.Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def notify(self, key: object) -> None:
        crash_point("relay-publish", key)
        try:
            self._client.publish(self.channel, b"1")
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
        self._task = asyncio.create_task(self._listen(), name="collapipe-live-wake")

    async def wait(self, seen_generation: int, timeout_s: float) -> None:
        if self.generation != seen_generation:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    def _woken(self) -> None:
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
                    self._woken()  # (re)subscribed: anything committed meanwhile is read now
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._woken()
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
