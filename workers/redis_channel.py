"""The production live channel: one Redis Stream per run plus one stream of all runs' status changes.

- ``publish`` (sync; Celery tasks and API threads): ``XADD run:{id}:events MAXLEN ~ N`` with the
  fields ``run_id``, ``kind`` and ``data`` (the JSON payload), and for ``status`` events the same
  entry, under the same id, on ``runs:status`` — one Lua script, so the streams never disagree.
  Each publish also pushes the run stream's expiry ``stream_ttl_s`` past its latest event.
- ``publish_round`` (``RoundLog``): a round event, refused when the run's round mark
  ``run:{id}:last_round`` is already at or past that round (checked and moved in the same script).
- ``read`` / ``head`` (async; the SSE endpoints): ``XREAD BLOCK`` after a stream id, ``XREVRANGE``.
  Stream ids (``<ms>-<seq>``) are the SSE ``id:`` lines, so ``Last-Event-ID`` resumes exactly.

The database stays the source of truth: a stream keeps the last ~``maxlen`` events only, and a
reader whose id was trimmed away continues at the oldest event still kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import weakref
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.backoff import ExponentialBackoff
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from backend.live.channel import ROUND, STATUS, LiveEvent
from backend.settings import Settings
from workers.settings import worker_settings_from

STATUS_STREAM = "runs:status"
EVENT_CLOCK = "live:last_event_id"

# One id sequence for every stream: the server's clock in ms, made strictly increasing by the last id
# handed out. A status event goes on its run's stream and on the status stream under the SAME id (the
# LiveChannel contract), which per-stream automatic ids could not give. Atomic: one script.
# A round event (ARGV[7] = its round index, else '') is refused — nil returned, nothing written — when
# the run's round mark (KEYS[4]: the highest round the stream carries) is at or above it; otherwise the
# mark moves to it in the same script. So a round is on the stream at most once, whoever publishes it.
# KEYS: run stream, status stream, clock, round mark. ARGV: maxlen, ttl_s, run_id, kind, data, is_status,
# round index or ''.
_PUBLISH = """
if ARGV[7] ~= '' then
  local mark = redis.call('GET', KEYS[4])
  if mark and tonumber(mark) >= tonumber(ARGV[7]) then
    return false
  end
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local seq = 0
local last = redis.call('GET', KEYS[3])
if last then
  local dash = string.find(last, '-', 1, true)
  local last_ms = tonumber(string.sub(last, 1, dash - 1))
  if ms <= last_ms then
    ms = last_ms
    seq = tonumber(string.sub(last, dash + 1)) + 1
  end
end
local id = string.format('%.0f-%.0f', ms, seq)
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], id, 'run_id', ARGV[3], 'kind', ARGV[4], 'data', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if ARGV[7] ~= '' then
  redis.call('SET', KEYS[4], ARGV[7], 'EX', ARGV[2])
else
  redis.call('EXPIRE', KEYS[4], ARGV[2])
end
if ARGV[6] == '1' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], id, 'run_id', ARGV[3], 'kind', ARGV[4], 'data', ARGV[5])
end
redis.call('SET', KEYS[3], id)
return id
"""
MAX_EVENTS_PER_READ = 500
MAX_BLOCK_S = 30.0  # one XREAD BLOCK waits at most this long; the socket timeout is above it
_STREAM_ID = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?")
_MAX_STREAM_PART = 2**64 - 1


def run_stream(run_id: int, prefix: str = "") -> str:
    """The Redis key of run ``run_id``'s event stream."""
    return f"{prefix}run:{run_id}:events"


def round_mark(run_id: int, prefix: str = "") -> str:
    """The Redis key holding the highest round index run ``run_id``'s stream carries."""
    return f"{prefix}run:{run_id}:last_round"


def parse_stream_id(after: str | None) -> str:
    """The XREAD start id for ``after`` (None: the beginning); ValueError for anything not a stream id."""
    if after is None:
        return "0"
    match = _STREAM_ID.fullmatch(after) if after.isascii() else None
    if match is None or any(int(part) > _MAX_STREAM_PART for part in match.groups() if part is not None):
        raise ValueError(
            f"event id {after[:40]!r} is not an id of this stream ('<milliseconds>-<sequence>', each "
            f"at most {_MAX_STREAM_PART})"
        )
    return after


def _retry() -> Retry:
    """A few quick retries absorb a Redis restart or failover without failing the run."""
    return Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=6)


class RedisStreamChannel:
    """``LiveChannel`` over Redis Streams (see the module docstring for the keys and fields)."""

    def __init__(
        self,
        redis_url: str,
        *,
        maxlen: int = 10_000,
        prefix: str = "",
        ttl_s: float = 7 * 24 * 3600.0,
        socket_timeout_s: float = 10.0,
        max_readers: int = 1000,
    ) -> None:
        self.redis_url = redis_url
        self.max_readers = max_readers
        self.maxlen = maxlen
        self.ttl_s = ttl_s
        self.prefix = prefix
        self.socket_timeout_s = socket_timeout_s
        self._sync: redis.Redis | None = None
        self._publish_script: Script | None = None
        # one asyncio client per event loop: a connection belongs to the loop that opened it
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )

    # -- writing (sync) -------------------------------------------------------------------------

    def _client(self) -> redis.Redis:
        if self._sync is None:
            self._sync = redis.Redis.from_url(
                self.redis_url,
                decode_responses=True,
                socket_timeout=self.socket_timeout_s,
                socket_connect_timeout=self.socket_timeout_s,
                retry=_retry(),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
                health_check_interval=30,
            )
        return self._sync

    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str:
        """Append one event to the run's stream (a status event to the status stream too); its id."""
        entry_id = self._append(run_id, kind, data, None)
        assert entry_id is not None  # only round events are ever refused
        return entry_id

    def publish_round(self, run_id: int, round_index: int, data: Mapping[str, Any]) -> str | None:
        """Append round ``round_index``'s event unless the stream already carries it or a later round
        (then None): one atomic script, so duplicates from a retry or a second publisher are refused."""
        if round_index < 0:
            raise ValueError(f"round_index={round_index}: rounds are numbered from 0")
        return self._append(run_id, ROUND, data, round_index)

    def last_published_round(self, run_id: int) -> int:
        """The highest round index on run ``run_id``'s stream (-1: none, or its mark expired)."""
        mark = self._client().get(round_mark(run_id, self.prefix))
        return -1 if mark is None else int(str(mark))

    def _append(self, run_id: int, kind: str, data: Mapping[str, Any], round_index: int | None) -> str | None:
        if self._publish_script is None:
            self._publish_script = self._client().register_script(_PUBLISH)
        keys = [
            run_stream(run_id, self.prefix),
            self.prefix + STATUS_STREAM,
            self.prefix + EVENT_CLOCK,
            round_mark(run_id, self.prefix),
        ]
        body = json.dumps(dict(data), separators=(",", ":"))
        args: list[str | int] = [self.maxlen, int(self.ttl_s), run_id, kind, body, int(kind == STATUS)]
        args.append("" if round_index is None else round_index)
        entry_id = self._publish_script(keys=keys, args=args)
        return None if entry_id is None else str(entry_id)

    # -- reading (async) ------------------------------------------------------------------------

    async def _async_client(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is None:
            # A waiting stream holds one connection for its XREAD BLOCK: a blocking pool lets up to
            # ``max_readers`` wait at once and queues the rest (a plain pool raises "Too many
            # connections" at redis-py's default of 100). redis-py's default 5 s socket timeout
            # would cut a longer XREAD BLOCK mid-wait: the timeout is the longest block plus a margin.
            pool = aioredis.BlockingConnectionPool.from_url(
                self.redis_url,
                max_connections=self.max_readers,
                timeout=MAX_BLOCK_S + self.socket_timeout_s,
                decode_responses=True,
                socket_timeout=MAX_BLOCK_S + self.socket_timeout_s,
                socket_connect_timeout=self.socket_timeout_s,
                retry=_retry(),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
                health_check_interval=30,
            )
            client = aioredis.Redis(connection_pool=pool)
            closer = _close_at_loop_shutdown(client)
            await closer.asend(None)  # registered with the loop: finalised by its shutdown_asyncgens()
            entry = self._async[loop] = _LoopClient(client, closer)
        return entry.client

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]:
        """Events after id ``after`` in order, waiting up to ``block_s`` seconds (at most MAX_BLOCK_S)
        for the first one."""
        start = parse_stream_id(after)
        block_s = min(block_s, MAX_BLOCK_S)
        block_ms = int(block_s * 1000) if block_s > 0 else None  # BLOCK 0 would wait forever
        if block_ms == 0:
            block_ms = 1
        response: Any = await (await self._async_client()).xread(
            {self._stream_key(run_id): start}, count=MAX_EVENTS_PER_READ, block=block_ms
        )
        return [_event(entry_id, fields) for _key, entries in response or [] for entry_id, fields in entries]

    async def head(self, run_id: int | None) -> str:
        """The id of the stream's latest event, ``"0"`` when it has none."""
        latest = await (await self._async_client()).xrevrange(self._stream_key(run_id), count=1)
        return str(latest[0][0]) if latest else "0"

    def validate_id(self, after: str) -> None:
        parse_stream_id(after)

    def _stream_key(self, run_id: int | None) -> str:
        return self.prefix + STATUS_STREAM if run_id is None else run_stream(run_id, self.prefix)

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every connection; call from the event loop the reads ran in (the app's shutdown)."""
        current = asyncio.get_running_loop()
        for loop, entry in list(self._async.items()):
            if loop is current:
                await entry.closer.aclose()
            else:
                _drop_async_connections(entry.client)
        self._async.clear()
        self.close()

    def close(self) -> None:
        """Close the publishing connections and drop the reading ones (use ``aclose`` when possible)."""
        for entry in list(self._async.values()):
            _drop_async_connections(entry.client)
        self._async.clear()
        if self._sync is not None:
            self._sync.close()
            self._sync.connection_pool.disconnect()
            self._sync = None
            self._publish_script = None


@dataclass
class _LoopClient:
    client: aioredis.Redis
    closer: AsyncGenerator[None, None]


async def _close_at_loop_shutdown(client: aioredis.Redis) -> AsyncGenerator[None, None]:
    """Suspended until its loop shuts down (``asyncio.run`` ends), then closes ``client`` in that loop.

    A loop finalises the async generators it started in ``shutdown_asyncgens()``, so a channel used
    from a short-lived loop (a test, ``anyio.run``) leaves no socket open even if nobody calls close.
    """
    try:
        yield
    finally:
        await client.aclose(close_connection_pool=True)


def _event(entry_id: str, fields: dict[str, str]) -> LiveEvent:
    return LiveEvent(str(entry_id), int(fields["run_id"]), fields["kind"], json.loads(fields["data"]))


def _drop_async_connections(client: aioredis.Redis) -> None:
    """Close an asyncio client's sockets without awaiting (its loop is gone or is another thread's)."""
    pool: Any = client.connection_pool
    connections = [*getattr(pool, "_available_connections", []), *getattr(pool, "_in_use_connections", [])]
    for connection in connections:
        writer = getattr(connection, "_writer", None)
        if writer is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed: nothing left to close
                writer.close()
            connection._writer = connection._reader = None


def make_channel(settings: Settings) -> RedisStreamChannel:
    """``COLLAPIPE_CHANNEL_FACTORY`` target: the Redis Stream channel for ``settings.redis_url``."""
    worker_settings = worker_settings_from(settings)
    return RedisStreamChannel(
        worker_settings.redis_url,
        maxlen=worker_settings.stream_maxlen,
        ttl_s=worker_settings.stream_ttl_s,
        prefix=worker_settings.redis_key_prefix,
        max_readers=worker_settings.stream_max_readers,
    )
