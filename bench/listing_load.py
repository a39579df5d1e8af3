"""The run listing under a team dashboard's load, and how fast the API answers again after it.

The production stack (PostgreSQL, Redis, one Celery worker), served by 1 and then 2 API processes
(``collapipe serve --workers N``), holding ``--listing-runs`` (60) finished runs of 20 rounds each
(every second round evaluated, so the listing's latest-round and latest-evaluation figures are
there to show), with one run going (the paced test policy: about 4 rounds a second) and
``--listing-streams`` (50) SSE streams open on it for the whole measurement.

For each process count and each of ``--listing-rates`` (50, 100, 200 requests/s) the run listing
``GET /api/runs?limit=50`` is requested open loop for ``--seconds`` through ``CONNECTIONS``
keep-alive connections (many browsers), and reported as its latency (p50, p99, max, from each
request's due time: a server falling behind shows), the requests that got another answer than 200
(``errors``: a shed request's 503 among them, counted apart as ``shed_503``) and those unanswered
after 10 s (``timeouts``). Meanwhile a probe requests the listing every ``PROBE_INTERVAL_S`` on a
connection of its own; ``recovery_s`` is the time from the end of the load's schedule to the first
probe from which on every probe got a 200 within ``RECOVERED_WITHIN_S`` (0: it never stopped doing
so; ``null``: not within ``RECOVERY_WINDOW_S``). With each figure the host's 1-minute load average
at the start of the load (other engineers' jobs share the 2 cores) and the API processes' shares
of a core.

    .venv/bin/python bench/service.py --listing-only [--listing-rates 50,100,200] [--seconds 10] \
        [--api-workers 1,2] [--profile DIR]

``--profile DIR`` serves with each API process sampling its own stacks (bench/request_profile.py,
summarised by ``.venv/bin/python bench/request_profile.py DIR``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from backend.db.engine import make_engine, make_session_factory
from backend.runtime import lifecycle
from backend.runtime.lifecycle import Lease, RunStore
from bench.host_cpu import in_group, process_cpu_s
from bench.service_processes import deployment_processes, load_average, start_api
from collapipe_core.records import RoundResult
from tests.backend.builders import PACED_POLICY, TEST_POLICIES, tiny_config
from tests.integration.http_load import paced_load
from tests.integration.processes import free_port, wait_until

LISTING = "/api/runs?limit=50"
CONNECTIONS = 256
REQUEST_TIMEOUT_S = 10.0
PROBE_INTERVAL_S = 0.25
RECOVERED_WITHIN_S = 1.0
RECOVERY_WINDOW_S = 30.0
STABLE_PROBES = 12  # after the load: this many good probes in a row end the probing (3 s)
ROUNDS_PER_RUN = 20
PACED_ROUNDS_PER_S = 4.0  # tests/backend/slow_policy.py's PacedUniform
GOAL_P99_MS = 100  # at 200 requests/s with 2 API processes


# -- the stored runs ----------------------------------------------------------------------------------


def evaluated(results: list[RoundResult]) -> list[RoundResult]:
    """The analytic rounds with an evaluation every second round (the analytic executor trains and
    evaluates nothing; the listing shows a run's latest evaluation)."""
    out = []
    for result in results:
        n = result.round.round
        if n % 2:
            record = dataclasses.replace(
                result.round, eval_loss=2.0 / (n + 1), eval_metrics={"eval_accuracy": n / (n + 1)}
            )
            result = RoundResult(record, result.devices)
        out.append(result)
    return out


def store_finished_runs(
    database_url: str, config: dict[str, Any], results: list[RoundResult], count: int, new_run: Any
) -> None:
    """``count`` runs that recorded ``results`` through the run lifecycle and succeeded.
    ``new_run(database_url, config, rounds)`` adds a running run held by the bench's lease."""
    engine = make_engine(database_url)
    store = RunStore(make_session_factory(engine))
    for _ in range(count):
        lease = Lease(new_run(database_url, config, len(results)), "bench:publisher", 3600.0)
        for result in results:
            lifecycle.record_round(store, lease, result)
        lifecycle.finish(store, lease, "succeeded", None)
    engine.dispose()


# -- streams held open ----------------------------------------------------------------------------------


@dataclass
class Streams:
    statuses: Counter[int] = field(default_factory=Counter)
    round_events: int = 0
    ended_early: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        open_now = sum(not t.done() for t in self.tasks)
        return {
            "opened": dict(self.statuses),
            "open_at_end": open_now,
            "ended_early": self.ended_early,
            "round_events": self.round_events,
        }


async def _hold_stream(base_url: str, token: str, run_id: int, streams: Streams) -> None:
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(
            f"GET /api/runs/{run_id}/events HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        status = int((await reader.readline()).split()[1])
        streams.statuses[status] += 1
        while chunk := await reader.read(65536):
            streams.round_events += chunk.count(b"event: round\n")
        streams.ended_early += 1
    except (OSError, ValueError, IndexError):
        streams.ended_early += 1
    finally:
        writer.close()


def open_streams(base_url: str, token: str, run_id: int, count: int) -> Streams:
    streams = Streams()
    streams.tasks = [
        asyncio.ensure_future(_hold_stream(base_url, token, run_id, streams)) for _ in range(count)
    ]
    return streams


async def close_streams(streams: Streams) -> dict[str, Any]:
    summary = streams.summary()
    for task in streams.tasks:
        task.cancel()
    await asyncio.gather(*streams.tasks, return_exceptions=True)
    return summary


# -- one load and its recovery --------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    sent_at: float  # loop time
    status: int | None  # None: no answer within the request timeout
    latency_s: float

    @property
    def normal(self) -> bool:
        return self.status == 200 and self.latency_s <= RECOVERED_WITHIN_S


async def _probe(base_url: str, token: str) -> Probe:
    loop = asyncio.get_running_loop()
    sent_at = loop.time()
    url = urlsplit(base_url)
    writer = None
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(url.hostname, url.port)
            writer.write(
                f"GET {LISTING} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            status = int((await reader.readline()).split()[1])
            await reader.read()  # the server closes after the body
    except (TimeoutError, OSError, ValueError, IndexError):
        return Probe(sent_at, None, loop.time() - sent_at)
    finally:
        if writer is not None:
            writer.close()
    return Probe(sent_at, status, loop.time() - sent_at)


def recovery_s(probes: list[Probe], load_end: float) -> float | None:
    """From ``load_end`` to the first probe after which every probe was answered normally; 0 when
    the probes sent at the end were; None when the last probe was not."""
    after = sorted((p for p in probes if p.sent_at >= load_end), key=lambda p: p.sent_at)
    if not after or not after[-1].normal:
        return None
    first_good = len(after)
    while first_good > 0 and after[first_good - 1].normal:
        first_good -= 1
    if first_good == 0:
        return 0.0
    return round(after[first_good].sent_at - load_end, 2)


async def load_with_probes(base_url: str, token: str, rate: float, seconds: float) -> dict[str, Any]:
    """The listing at ``rate`` for ``seconds`` and the probes around it (see the module's docstring)."""
    loop = asyncio.get_running_loop()
    started: list[float] = []
    load = asyncio.ensure_future(
        paced_load(
            base_url,
            {"Authorization": f"Bearer {token}"},
            [LISTING],
            rate,
            seconds,
            connections=CONNECTIONS,
            timeout_s=REQUEST_TIMEOUT_S,
            on_start=started.append,
        )
    )
    probes: list[asyncio.Task[Probe]] = []
    while not started and not load.done():
        await asyncio.sleep(0.01)
    if not started:
        await load  # raises what stopped it
    load_end = started[0] + seconds
    while True:
        probes.append(asyncio.ensure_future(_probe(base_url, token)))
        await asyncio.sleep(PROBE_INTERVAL_S)
        now = loop.time()
        done_after = [p.result() for p in probes if p.done() and p.result().sent_at >= load_end]
        stable = len(done_after) >= STABLE_PROBES and all(p.normal for p in done_after[-STABLE_PROBES:])
        if now > load_end + RECOVERY_WINDOW_S or (stable and load.done()):
            break
    stats = (await load)[LISTING]
    answered = list(await asyncio.gather(*probes))
    during = Counter(str(p.status) for p in answered if p.sent_at < load_end)
    return {
        **stats.summary(),
        "answered": len(stats.latencies_ms),
        "recovery_s": recovery_s(answered, load_end),
        "probes_during_load": dict(during),
    }


# -- the whole scenario ---------------------------------------------------------------------------------


def _launch_running_run(url: str, token: str, rounds: int) -> int:
    config = tiny_config(training={"rounds": rounds}, scheduler={"policy": PACED_POLICY})
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        created = client.post("/api/runs", json={"config": config, "name": "going"})
        assert created.status_code == 201, created.text
        run_id: int = created.json()["id"]
        wait_until(lambda: client.get(f"/api/runs/{run_id}").json()["status"] == "running", 120.0)
    return run_id


def _cancel(url: str, token: str, run_id: int) -> dict[str, Any]:
    """Cancel the run going; its state (or why it could not be read: an API that stopped answering)."""
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
            client.post(f"/api/runs/{run_id}/cancel")
            run = client.get(f"/api/runs/{run_id}").json()
    except httpx.HTTPError as err:
        return {"unanswered": f"{type(err).__name__} after the loads: the API did not answer in 30 s"}
    return {"status": run["status"], "rounds_done": run["rounds_done"], "error": run["error"]}


async def _measure(
    url: str, token: str, run_id: int, rates: list[float], seconds: float, streams: int, group: int
) -> dict[str, Any]:
    held = open_streams(url, token, run_id, streams)
    await asyncio.sleep(2.0)  # the streams opened and replayed the run so far
    loads: dict[str, Any] = {}
    for rate in rates:
        load_before = load_average()
        cpu_before, started = process_cpu_s(in_group(group)), time.perf_counter()
        figures = await load_with_probes(url, token, rate, seconds)
        elapsed = time.perf_counter() - started
        cpu_after = process_cpu_s(in_group(group))
        shares = [round((cpu_after[pid] - cpu_before.get(pid, 0.0)) / elapsed, 2) for pid in cpu_after]
        loads[f"{rate:g}_per_s"] = {
            **figures,
            "load_average": load_before,
            "api_core_share_by_process": sorted(shares, reverse=True),
        }
        await asyncio.sleep(2.0)
    return {"loads": loads, "streams": await close_streams(held)}


def bench_listing(
    rates: list[float],
    seconds: float,
    api_workers: list[int],
    streams: int,
    runs: int,
    without: list[str],
    profile_dir: Path | None,
    new_run: Any,
    round_results: Any,
) -> dict[str, Any]:
    """The scenario of the module's docstring; ``new_run`` and ``round_results`` are bench/service.py's
    ``add_running_run`` and ``round_results``."""
    env = {
        "COLLAPIPE_POLICIES": json.dumps(TEST_POLICIES),
        "COLLAPIPE_SSE_HEARTBEAT_S": "15",
        "COLLAPIPE_THREADS_PER_RUN": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),  # the worker imports the paced policy
    }
    report: dict[str, Any] = {
        "listed_runs": runs + 1,
        "streams": streams,
        "connections": CONNECTIONS,
        "goal": f"p99 <= {GOAL_P99_MS} ms at 200/s with 2 API processes",
    }
    config, results = round_results(ROUNDS_PER_RUN)
    with tempfile.TemporaryDirectory(prefix="collapipe-listing-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        env |= {"COLLAPIPE_ARTIFACT_DIR": str(root / "runs"), "COLLAPIPE_DATA_DIR": str(root / "data")}
        token, processes = deployment_processes(stack, "production", root, env, "bench-listing")
        store_finished_runs(env["COLLAPIPE_DATABASE_URL"], config, evaluated(results), runs, new_run)
        processes.start_worker(concurrency=1)
        per_count = len(rates) * (seconds + 12) + 20
        for workers in api_workers:
            port = free_port()
            api = start_api(processes, port, workers, without, profile_dir=profile_dir)
            url = f"http://127.0.0.1:{port}"
            run_id = _launch_running_run(url, token, int(PACED_ROUNDS_PER_S * per_count) + 40)
            figures = asyncio.run(_measure(url, token, run_id, rates, seconds, streams, api.pid))
            figures["run_going"] = _cancel(url, token, run_id)
            report[f"{workers}_process{'es' if workers > 1 else ''}"] = figures
            api.terminate(timeout_s=10.0)
            processes.services.remove(api)
    return report
