"""The service measured side by side: live latency, API latency under load, ingest rate.

One run prints one JSON object with, for the production stack (PostgreSQL + Redis) and the embedded
default (SQLite + DB-tailing live channel), each served by uvicorn in a subprocess on loopback:

- ``live_latency_ms``: from a publish in another process (as a worker publishes a round) to the
  receipt by an SSE client, over ``--events`` round events of a 20-device run (~12 KB each):
  ``time.monotonic_ns()`` is stamped into the event before ``publish`` and compared on receipt
  (CLOCK_MONOTONIC is system-wide on one host). Goals: p99 <= 25 ms through Redis, <= 150 ms embedded.
- ``api_latency_ms_<N>_process(es)``: run listing and a metric query (a 1,000-round series, downsampled) at
  each of ``--rates`` requests/s in total for ``--seconds`` s, open loop (requests are sent on schedule
  whatever the earlier ones are doing, so a slow server's queueing shows in the latencies; a request
  still unanswered after 10 s counts as a timeout). Goal: p99 <= 50 ms. The production stack is
  loaded with each of ``--api-workers`` uvicorn processes (``collapipe serve --workers N``, which
  needs the Celery executor); the embedded default always serves from one process. With each load,
  ``cpu``: CPU milliseconds per answered request spent by the API's processes (and each process's
  share of a core), by the load generator and, on the production stack, by all PostgreSQL
  processes of the host (the load's three consumers of the same cores); and the cores kept busy
  meanwhile by everything else on the host (``other_processes_cores``: a loaded machine shows here).
- ``ingest``: round records per second stored through the SQL sink (``SqlRoundSink``: one fenced
  transaction per round, then the live publish), 1,000 rounds x 20 devices.
- ``stream_load``: the service started as an operator would (``collapipe serve``, and a Celery
  worker for production) with 100 SSE streams opened at once on a running run while the run listing
  is requested 50 times a second for 20 s (tests/integration/stream_load.py, what
  tests/integration/test_load.py asserts on): the listing's latencies, the rounds each stream
  received, readiness answers. Goal: listing p99 <= 250 ms.

    .venv/bin/python bench/service.py [--events 520] [--rates 200,50] [--seconds 10] [--api-workers 1,2] \
                                      [--no-stream-load]

Needs PostgreSQL and Redis on 127.0.0.1 (as the integration tests); uses keys under its own prefix
in Redis db 14 and a throwaway database, both removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from backend.db.base import utcnow  # noqa: E402
from backend.db.engine import make_engine, make_session_factory  # noqa: E402
from backend.db.models import Run  # noqa: E402
from backend.live.channel import ROUND, STATUS, LiveChannel, MemoryChannel, status_payload  # noqa: E402
from backend.migrations import upgrade_to_head  # noqa: E402
from backend.runs import lease_repository as leases  # noqa: E402
from backend.runs.sink import SqlRoundSink  # noqa: E402
from backend.users.service import bootstrap  # noqa: E402
from collapipe_core import api  # noqa: E402
from collapipe_core.records import RoundResult  # noqa: E402
from collapipe_core.runner import Runner  # noqa: E402
from collapipe_core.sinks import MemorySink  # noqa: E402
from collapipe_core.validation import parse_config  # noqa: E402
from tests.backend.builders import PACED_POLICY, TEST_POLICIES, tiny_config  # noqa: E402
from tests.e2e.server import running_server  # noqa: E402
from tests.integration.http_load import paced_load, percentiles  # noqa: E402
from tests.integration.processes import BIN, ProcessGroup, Service, free_port, wait_until  # noqa: E402
from tests.integration.sse import sse_events  # noqa: E402
from tests.integration.stream_load import stream_load  # noqa: E402
from tests.workers.services import fresh_postgres_database, redis_namespace  # noqa: E402
from workers.redis_channel import RedisStreamChannel  # noqa: E402

REDIS_DB = 14
REQUEST_TIMEOUT_S = 10.0
INGEST_ROUNDS = 1000
CLAIMANT = "bench:publisher"


def round_results(rounds: int) -> tuple[dict[str, Any], list[RoundResult]]:
    """The paper-transformer network (4 clusters x 5 devices) on the analytic executor."""
    data = api.load_config(REPO / "examples" / "paper-transformer.yaml").model_dump(
        mode="json", by_alias=True
    )
    data["executor"] = "analytic"
    data["training"]["rounds"] = rounds
    sink = MemorySink()
    Runner(parse_config(data), sink).run()
    return data, sink.results


def add_running_run(database_url: str, config: dict[str, Any], rounds: int) -> int:
    """A run row held by the bench's lease (so no dispatcher touches it); returns its id."""
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        run = Run(
            name="bench",
            config=config,
            status="running",
            total_rounds=rounds,
            policy=config["scheduler"]["policy"],
            executor="analytic",
            lease_owner=CLAIMANT,
            lease_expires_at=utcnow() + timedelta(hours=1),
            started_at=utcnow(),
            attempt=1,
        )
        session.add(run)
        session.commit()
        run_id = run.id
    engine.dispose()
    return run_id


def add_runs(database_url: str, config: dict[str, Any], count: int) -> None:
    """Finished runs to list."""
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        for n in range(count):
            session.add(
                Run(
                    name=f"listed-{n}",
                    config=config,
                    status="succeeded",
                    total_rounds=10,
                    rounds_done=10,
                    policy="uniform",
                    executor="analytic",
                )
            )
        session.commit()
    engine.dispose()


def bench_ingest(
    database_url: str, channel: LiveChannel, results: list[RoundResult], config: dict[str, Any]
) -> dict[str, float]:
    """Rounds/s and device rows/s through SqlRoundSink into ``database_url``, publishing on ``channel``."""
    run_id = add_running_run(database_url, config, len(results))
    engine = make_engine(database_url)
    sink = SqlRoundSink(make_session_factory(engine), run_id, CLAIMANT, channel, lease_s=3600)
    started = time.perf_counter()
    for result in results:
        sink.write_round(result)
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert sink.rounds_inserted == len(results)
    devices = sum(len(r.devices) for r in results)
    return {
        "rounds": len(results),
        "seconds": round(elapsed, 3),
        "rounds_per_s": round(len(results) / elapsed, 1),
        "device_rows_per_s": round(devices / elapsed, 1),
        "run_id": run_id,
    }


# -- live latency ---------------------------------------------------------------------------------


def publisher(
    redis: tuple[str, str] | None,
    database_url: str,
    run_id: int,
    payload: dict[str, Any],
    count: int,
    interval_s: float,
) -> None:
    """Another process, as a worker: publish ``count`` stamped round events, then finish the run.

    The channel is Redis Streams when ``redis`` (URL, key prefix) is given, else the embedded DB table.
    """
    from backend.live.db_channel import DbEventChannel

    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    channel: LiveChannel = RedisStreamChannel(redis[0], prefix=redis[1]) if redis else DbEventChannel(factory)
    start = time.monotonic()
    for n in range(count):
        time.sleep(max(0.0, start + n * interval_s - time.monotonic()))
        event = {**payload, "round": {**payload["round"], "round": n}, "published_ns": time.monotonic_ns()}
        channel.publish(run_id, ROUND, event)
    with factory() as session:
        leases.finish_run(session, run_id, CLAIMANT, "succeeded", None, utcnow())
        session.commit()
    channel.publish(run_id, STATUS, status_payload(run_id, "succeeded", count, count, None))
    channel.close()
    engine.dispose()


def bench_live(
    api_url: str,
    token: str,
    run_id: int,
    start_publisher: Callable[[], multiprocessing.process.BaseProcess],
    count: int,
) -> dict[str, float]:
    """Receive the run's SSE stream while the publisher runs; latency of each round event."""
    latencies_ms: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    process: multiprocessing.process.BaseProcess | None = None
    with (
        httpx.Client(base_url=api_url, headers=headers, timeout=60) as client,
        client.stream("GET", f"/api/runs/{run_id}/events") as response,
    ):
        assert response.status_code == 200, response.read()
        process = start_publisher()  # connected: the first event cannot be missed or replayed late
        for event in sse_events(response):
            if event.kind == ROUND:
                latencies_ms.append((time.monotonic_ns() - event.data["published_ns"]) / 1e6)
    process.join(timeout=60)
    warm = latencies_ms[20:]  # the first events pay for connections and caches
    return {"events": len(warm), **percentiles(warm)}


# -- API under load ---------------------------------------------------------------------------------


def api_load(
    api_url: str,
    token: str,
    paths: dict[str, str],
    rate: float,
    seconds: float,
    api_group: int,
    postgres: bool,
) -> dict[str, Any]:
    """``paths`` (label -> path) requested in turn at ``rate`` requests/s in total for ``seconds``.

    Also the CPU time spent meanwhile, per request answered: by the API's processes (the process
    group ``api_group``; each process's share of a core too), by the load generator (this process)
    and, if ``postgres``, by every PostgreSQL process of the host (other users of the server count).
    """
    headers = {"Authorization": f"Bearer {token}"}
    api_before, pg_before = process_cpu_s(in_group(api_group)), process_cpu_s(is_postgres)
    host_before, generator_before, started = host_busy_s(), time.process_time(), time.perf_counter()
    stats = asyncio.run(
        paced_load(api_url, headers, list(paths.values()), rate, seconds, timeout_s=REQUEST_TIMEOUT_S)
    )
    generator_s, elapsed = time.process_time() - generator_before, time.perf_counter() - started
    host_s = host_busy_s() - host_before
    api_after, pg_after = process_cpu_s(in_group(api_group)), process_cpu_s(is_postgres)
    answered = max(1, sum(len(stats[path].latencies_ms) for path in paths.values()))
    api_s = {pid: api_after[pid] - api_before.get(pid, 0.0) for pid in api_after}

    def per_request_ms(cpu_s: float) -> float:
        return round(cpu_s * 1000 / answered, 3)

    cpu: dict[str, Any] = {
        "api_ms_per_request": per_request_ms(sum(api_s.values())),
        "api_core_share_by_process": sorted((round(s / elapsed, 3) for s in api_s.values()), reverse=True),
        "load_generator_ms_per_request": per_request_ms(generator_s),
    }
    pg_s = sum(pg_after[pid] - pg_before.get(pid, 0.0) for pid in pg_after)
    if postgres:
        cpu["postgres_ms_per_request"] = per_request_ms(pg_s)
    # whatever else ran on the host meanwhile (other users' jobs): cores busy beyond the three above
    others_s = host_s - sum(api_s.values()) - generator_s - pg_s
    cpu["other_processes_cores"] = round(max(0.0, others_s) / elapsed, 2)
    return {
        "seconds": seconds,
        "request_timeout_s": REQUEST_TIMEOUT_S,
        **{label: stats[path].summary() for label, path in paths.items()},
        "cpu": cpu,
    }


def process_cpu_s(select: Callable[[str, list[str]], bool]) -> dict[int, float]:
    """User + system CPU seconds of each process whose (name, /proc stat fields) ``select`` accepts."""
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()  # fields[0] is the state, as in proc(5)'s 3rd
        if select(name, fields):
            found[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) * tick_s
    return found


def host_busy_s() -> float:
    """CPU seconds all cores of the host spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def in_group(group: int) -> Callable[[str, list[str]], bool]:
    return lambda _name, fields: int(fields[2]) == group


def is_postgres(name: str, _fields: list[str]) -> bool:
    return name == "postgres"


# -- one stack ---------------------------------------------------------------------------------------


def prepare_database(database_url: str) -> str:
    """Migrate; an admin token for the bench; returns the token."""
    upgrade_to_head(database_url)
    token = secrets.token_urlsafe(24)
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        bootstrap(session, token)
        session.commit()
    engine.dispose()
    return token


def start_api(processes: ProcessGroup, port: int, workers: int) -> Service:
    """uvicorn as ``collapipe serve --workers N`` runs it (access log off, as in the tests)."""
    if workers == 1:
        return processes.start_api(port)
    argv = [str(BIN / "uvicorn"), "backend.app:create_app", "--factory", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "3"]
    service = processes._start("api", [*argv, "--workers", str(workers)])
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 30.0, service.log)
    return service


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def measure_stack(
    name: str,
    env: dict[str, str],
    database_url: str,
    ingest_channel: LiveChannel,
    redis: tuple[str, str] | None,
    args: argparse.Namespace,
    log_dir: Path,
    api_workers: list[int],
) -> dict[str, Any]:
    """Ingest, then live latency (first API process count) and API load for each count in ``api_workers``."""
    token = prepare_database(database_url)
    config, results = round_results(INGEST_ROUNDS)
    ingest = bench_ingest(database_url, ingest_channel, results, config)
    add_runs(database_url, config, 200)
    paths = {
        "list_runs": "/api/runs?limit=50",
        "round_metrics": f"/api/runs/{ingest['run_id']}/rounds?max_points=500&fields=latency_s"
        "&fields=objective",
    }
    report: dict[str, Any] = {"ingest": ingest}
    for workers in api_workers:
        processes = ProcessGroup(env, log_dir / f"{name}-{workers}")
        port = free_port()
        try:
            api = start_api(processes, port, workers)
            api_url = f"http://127.0.0.1:{port}"
            if "live_latency_ms" not in report:
                report["live_latency_ms"] = _live(api_url, token, database_url, config, results, redis, args)
            load = {}
            for rate in args.rates:
                load[f"{rate:g}_per_s"] = api_load(
                    api_url, token, paths, rate, args.seconds, api.pid, postgres=redis is not None
                )
                time.sleep(2.0)  # let the server drain before the next rate
            report[f"api_latency_ms_{workers}_process{'es' if workers > 1 else ''}"] = load
        finally:
            processes.close()
    return report


def _live(
    api_url: str,
    token: str,
    database_url: str,
    config: dict[str, Any],
    results: list[RoundResult],
    redis: tuple[str, str] | None,
    args: argparse.Namespace,
) -> dict[str, float]:
    live_run = add_running_run(database_url, config, args.events)
    payload = results[0].to_json()
    context = multiprocessing.get_context("spawn")

    def start() -> multiprocessing.process.BaseProcess:
        process = context.Process(
            target=publisher,
            args=(redis, database_url, live_run, payload, args.events, args.interval),
        )
        process.start()
        return process

    return bench_live(api_url, token, live_run, start, args.events)


def bench_stream_load(deployment: str, root: Path) -> dict[str, Any]:
    """100 streams on a running run + the listing at 50 req/s for 20 s (module docstring)."""
    env = {
        "COLLAPIPE_POLICIES": json.dumps(TEST_POLICIES),
        "PYTHONPATH": str(REPO),
        "COLLAPIPE_SSE_HEARTBEAT_S": "15",
    }
    directory = root / f"stream-load-{deployment}"
    directory.mkdir(parents=True, exist_ok=True)
    with running_server(directory, deployment, env) as server:
        run_id = server.launch(tiny_config(training={"rounds": 100}, scheduler={"policy": PACED_POLICY}))
        server.wait_for_run(run_id, ("running",), timeout_s=120)
        report = asyncio.run(stream_load(server.url, server.token, run_id, streams=100, rate=50, seconds=20))
    return report.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=520, help="round events per live-latency run")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between published events")
    parser.add_argument(
        "--rates",
        type=lambda text: [float(r) for r in text.split(",")],
        default=[200.0, 50.0],
        help="API request rates to measure, requests/s (the goal is set at 200)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of the API load")
    parser.add_argument(
        "--api-workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="API process counts to load (production stack; `collapipe serve --workers N`); "
        "the embedded default always runs one",
    )
    parser.add_argument(
        "--no-stream-load", action="store_true", help="skip the 100-streams + listing scenario (~2 min)"
    )
    args = parser.parse_args()
    base_env = {"COLLAPIPE_THREADS_PER_RUN": "1", "COLLAPIPE_SSE_HEARTBEAT_S": "5"}
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="collapipe-bench-") as tmp:
        root = Path(tmp)
        with (
            fresh_postgres_database("collapipe_bench") as pg_url,
            redis_namespace(REDIS_DB, "bench") as (redis_url, prefix),
        ):
            redis_channel = RedisStreamChannel(redis_url, prefix=prefix)
            env = {
                **base_env,
                "COLLAPIPE_DATABASE_URL": pg_url,
                "COLLAPIPE_REDIS_URL": redis_url,
                "COLLAPIPE_REDIS_KEY_PREFIX": prefix,
                "COLLAPIPE_EXECUTOR": "celery",
                "COLLAPIPE_DISPATCHER_FACTORY": "workers.executor:make_dispatcher",
                "COLLAPIPE_CHANNEL_FACTORY": "workers.redis_channel:make_channel",
                "COLLAPIPE_ARTIFACT_DIR": str(root / "artifacts"),
            }
            report["production_postgres_redis"] = measure_stack(
                "production", env, pg_url, redis_channel, (redis_url, prefix), args, root, args.api_workers
            )
            redis_channel.close()
        sqlite_url = f"sqlite:///{root / 'embedded.db'}"
        env = {
            **base_env,
            "COLLAPIPE_DATABASE_URL": sqlite_url,
            "COLLAPIPE_EXECUTOR": "local",
            "COLLAPIPE_ARTIFACT_DIR": str(root / "artifacts"),
        }
        report["embedded_sqlite_db_tail"] = measure_stack(
            "embedded", env, sqlite_url, _db_channel(sqlite_url), None, args, root, [1]
        )
        if not args.no_stream_load:
            report["stream_load"] = {
                deployment: bench_stream_load(deployment, root) for deployment in ("production", "embedded")
            }
    report["sql_sink_no_publish_postgres"] = _ingest_without_publish()
    report["goals"] = {
        "live_p99_ms": {"redis": 25, "embedded": 150},
        "api_p99_ms": 50,
        "stream_load_listing_p99_ms": 250,
    }
    print(json.dumps(report, indent=2))


def _db_channel(database_url: str) -> LiveChannel:
    from backend.live.db_channel import DbEventChannel

    return DbEventChannel(make_session_factory(make_engine(database_url)))


def _ingest_without_publish() -> dict[str, float]:
    """The SQL part of the sink alone on PostgreSQL (the live channel is an in-memory list)."""
    with fresh_postgres_database("collapipe_bench") as pg_url:
        config, results = round_results(INGEST_ROUNDS)
        return bench_ingest(pg_url, MemoryChannel(), results, config)


if __name__ == "__main__":
    main()
