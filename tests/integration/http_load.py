"""An open-loop HTTP/1.1 load generator on raw asyncio streams (bench/service.py, the load tests).

Why not httpx: with hundreds of requests waiting for a pooled connection its pool bookkeeping costs
more CPU than the server under test on a 2-core machine (measured: the client saturated first). Here
a request costs a write and a few reads on one of ``connections`` keep-alive connections.

Request i is due at ``i / rate`` seconds whatever the earlier ones are doing; its latency counts from
that due time to the last byte of the response, so time spent waiting for a free connection (the
server falling behind) is counted, not hidden (no coordinated omission). A request unanswered after
``timeout_s`` counts as a timeout; the whole load is cut off ``timeout_s`` after the last due time.
A connection the server closed while it sat idle (its keep-alive timeout, 5 s in uvicorn: at 50
requests/s on 256 connections each waits 5.1 s) is replaced and the request sent on the new one, as a
browser does, instead of counting as a timeout.

The generator's own heap is frozen out of the garbage collector's reach for the load: a full
collection walking the objects the calling process already holds (a bench's round records: ~300k
objects) took ~200 ms, during which no response was read, and counted as server latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


async def _open(host: str, port: int) -> _Connection:
    reader, writer = await asyncio.open_connection(host, port)
    return _Connection(reader, writer)


async def _get(conn: _Connection, request: bytes) -> int:
    """Send one GET and read the whole response; returns its status code."""
    conn.writer.write(request)
    status_line = await conn.reader.readline()
    if not status_line:  # the server closed the connection (e.g. its keep-alive timeout)
        raise ConnectionResetError("the server closed the connection")
    status = int(status_line.split()[1])
    length, chunked = 0, False
    while (line := await conn.reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
        elif name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if not chunked:
        await conn.reader.readexactly(length)
        return status
    while size := int((await conn.reader.readline()).strip(), 16):
        await conn.reader.readexactly(size + 2)
    await conn.reader.readline()
    return status


async def _get_reconnecting(
    conn: _Connection, request: bytes, host: str, port: int
) -> tuple[_Connection, int]:
    """``_get`` on ``conn``, or once more on a new connection when the server had closed ``conn``
    while it sat idle (its keep-alive timeout; the close may cross the request), as browsers retry a
    GET; the reconnection counts in the latency. Returns the connection used and the status."""
    if not conn.reader.at_eof():
        try:
            return conn, await _get(conn, request)
        except ConnectionResetError:
            pass
    conn.close()
    conn = await _open(host, port)
    return conn, await _get(conn, request)


@dataclass
class PathStats:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    timeouts: int = 0

    def summary(self) -> dict[str, float]:
        return {**percentiles(self.latencies_ms), "errors": self.errors, "timeouts": self.timeouts}


async def paced_load(
    base_url: str,
    headers: dict[str, str],
    paths: list[str],
    rate: float,
    seconds: float,
    connections: int = 32,
    timeout_s: float = 10.0,
    on_start: Callable[[float], None] | None = None,
) -> dict[str, PathStats]:
    """GET ``paths`` in turn at ``rate`` requests/s for ``seconds``; statistics per path.
    ``on_start`` is told the loop time at which the schedule starts (request 0 is due)."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    header_lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    requests = {p: f"GET {p} HTTP/1.1\r\nHost: {host}:{port}\r\n{header_lines}\r\n".encode() for p in paths}
    stats = {p: PathStats() for p in paths}
    pool: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await _open(host, port))
    for path in paths:  # warm up: the server's caches and lazy imports
        conn = await pool.get()
        await _get(conn, requests[path])
        pool.put_nowait(conn)
    gc.collect()  # before the schedule starts: this full collection is the slow one
    gc.freeze()  # until the load ends (see the module's docstring)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.1
    if on_start is not None:
        on_start(start)
    total = int(rate * seconds)

    async def one(i: int) -> None:
        path = paths[i % len(paths)]
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        conn = await pool.get()
        try:
            conn, status = await asyncio.wait_for(
                _get_reconnecting(conn, requests[path], host, port), timeout_s
            )
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            stats[path].timeouts += 1
            conn.close()  # its state is unknown: replace it
            conn = await _open(host, port)
            return
        finally:
            pool.put_nowait(conn)
        stats[path].latencies_ms.append((loop.time() - due) * 1000)
        if status != 200:
            stats[path].errors += 1

    try:
        tasks = [asyncio.ensure_future(one(i)) for i in range(total)]
        _done, pending = await asyncio.wait(tasks, timeout=seconds + timeout_s + 1.0)
    finally:
        gc.unfreeze()
    for task in pending:  # still waiting for a connection after the cut-off: the server fell behind
        task.cancel()
        stats[paths[tasks.index(task) % len(paths)]].timeouts += 1
    await asyncio.gather(*pending, return_exceptions=True)
    while not pool.empty():
        pool.get_nowait().close()
    with contextlib.suppress(Exception):
        await asyncio.sleep(0)  # let the transports close
    return stats


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``values`` in their unit, rounded to 0.01 (empty when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return {}
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50": round(statistics.median(ordered), 2), "p99": round(p99, 2), "max": round(ordered[-1], 2)}
