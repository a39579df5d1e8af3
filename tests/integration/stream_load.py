"""Many clients at once against a real server: SSE streams on a running run, paced run listing,
readiness polls and one idle stream (tests/integration/test_load.py asserts; bench/service.py reports).

All clients share one asyncio loop on raw HTTP/1.1 connections (httpx's pool bookkeeping costs more
CPU than the server under test on a 2-core machine, see http_load.py):

- ``streams`` connections open ``GET /api/runs/{id}/events`` at the same moment and read until the
  server ends the stream; each records the distinct round indices it received and its final status;
- the run listing ``GET /api/runs?limit=50`` is requested at ``rate`` per second for ``seconds``
  (open loop, http_load.paced_load);
- ``GET /readyz`` is polled every ``READY_POLL_S`` meanwhile; every answer's database check is kept;
- optionally one stream of all runs' status changes is held open ``idle_s`` seconds, counting the
  keep-alive comments that arrive while nothing happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tests.integration.http_load import PathStats, paced_load

READY_POLL_S = 0.5
LISTING = "/api/runs?limit=50"


@dataclass
class StreamResult:
    status: int = 0
    rounds: set[int] = field(default_factory=set)
    final_status: str | None = None
    error: str | None = None


@dataclass
class IdleResult:
    open_s: float = 0.0
    keepalives: int = 0
    events: int = 0
    closed_early: bool = False
    error: str | None = None


@dataclass
class LoadReport:
    streams: list[StreamResult]
    listing: PathStats
    readiness: Counter[str]
    idle: IdleResult | None

    def summary(self) -> dict[str, object]:
        rounds = [len(s.rounds) for s in self.streams]
        return {
            "streams": len(self.streams),
            "streams_opened": sum(s.status == 200 for s in self.streams),
            "rounds_per_stream_min_max": [min(rounds, default=0), max(rounds, default=0)],
            "stream_errors": sorted({s.error for s in self.streams if s.error}),
            "listing_ms": self.listing.summary(),
            "listing_requests": len(self.listing.latencies_ms),
            "readiness": dict(self.readiness),
            "idle": None if self.idle is None else vars(self.idle),
        }


async def _request(
    base_url: str, path: str, token: str, close: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """Send a GET; returns the connection after the response headers, and the status code."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    connection = "Connection: close\r\n" if close else ""
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"{connection}\r\n".encode()
    )
    status = int((await reader.readline()).split()[1])
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    return reader, writer, status


async def _lines(reader: asyncio.StreamReader) -> AsyncIterator[str]:
    """The lines of a chunked response body, until the last chunk."""
    pending = b""
    while True:
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            return
        pending += await reader.readexactly(size)
        await reader.readexactly(2)
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode()


async def _stream(base_url: str, token: str, run_id: int, deadline_s: float) -> StreamResult:
    result = StreamResult()
    writer = None
    try:
        async with asyncio.timeout(deadline_s):
            reader, writer, result.status = await _request(base_url, f"/api/runs/{run_id}/events", token)
            if result.status != 200:
                result.error = f"HTTP {result.status}"
                return result
            kind = ""
            async for line in _lines(reader):
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "round":
                    result.rounds.add(int(json.loads(line[6:])["round"]["round"]))
                elif line.startswith("data: ") and kind == "status":
                    result.final_status = json.loads(line[6:])["status"]
    except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as err:
        result.error = f"{type(err).__name__}: {err}"[:200]
    finally:
        if writer is not None:
            writer.close()
    return result


async def _idle(base_url: str, token: str, idle_s: float) -> IdleResult:
    result = IdleResult()
    loop = asyncio.get_running_loop()
    started = loop.time()
    writer = None
    try:
        reader, writer, status = await _request(base_url, "/api/runs/events", token)
        if status != 200:
            result.error = f"HTTP {status}"
            return result
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(idle_s):
                async for line in _lines(reader):
                    if line.startswith(": keepalive"):
                        result.keepalives += 1
                    elif line.startswith("data: "):
                        result.events += 1
                result.closed_early = True  # the server ended the stream
    except (OSError, ValueError, asyncio.IncompleteReadError) as err:
        result.error = f"{type(err).__name__}: {err}"[:200]
        result.closed_early = True
    finally:
        result.open_s = round(loop.time() - started, 1)
        if writer is not None:
            writer.close()
    return result


async def _readiness(base_url: str, stop: asyncio.Event, seen: Counter[str]) -> None:
    while not stop.is_set():
        writer = None
        try:
            reader, writer, status = await asyncio.wait_for(_request(base_url, "/readyz", "", True), 10)
            body = await asyncio.wait_for(reader.read(), 10)  # the server closes after the body
            if status in (200, 503):
                seen[str(json.loads(body)["checks"]["database"])[:60]] += 1
            else:
                seen[f"HTTP {status}"] += 1
        except (TimeoutError, OSError, ValueError) as err:
            seen[f"{type(err).__name__}"] += 1
        finally:
            if writer is not None:
                writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), READY_POLL_S)


async def stream_load(
    base_url: str,
    token: str,
    run_id: int,
    *,
    streams: int = 100,
    rate: float = 50.0,
    seconds: float = 20.0,
    idle_s: float | None = None,
    stream_deadline_s: float = 180.0,
) -> LoadReport:
    """Open ``streams`` SSE streams on run ``run_id`` at once while listing runs at ``rate``/s for
    ``seconds`` and polling readiness; optionally hold an idle status stream ``idle_s`` seconds."""
    stop = asyncio.Event()
    readiness: Counter[str] = Counter()
    poller = asyncio.ensure_future(_readiness(base_url, stop, readiness))
    idle = asyncio.ensure_future(_idle(base_url, token, idle_s)) if idle_s else None
    stream_tasks = [
        asyncio.ensure_future(_stream(base_url, token, run_id, stream_deadline_s)) for _ in range(streams)
    ]
    headers = {"Authorization": f"Bearer {token}"}
    listing = (await paced_load(base_url, headers, [LISTING], rate, seconds, connections=16))[LISTING]
    results = await asyncio.gather(*stream_tasks)
    idle_result = await idle if idle is not None else None
    stop.set()
    await poller
    return LoadReport(list(results), listing, readiness, idle_result)
