"""The service measured side by side: live latency, API latency under load, ingest rate.

One run prints one JSON object with, for the production stack (PostgreSQL + Celery deployment:
Redis wake-ups) and the embedded default (SQLite, polled outbox), each served by uvicorn in a
subprocess on loopback:

- ``live_latency_ms``: from the commit of a round in another process (as a worker records a round:
  ``lifecycle.record_round``, the round and its outbox event in one transaction, then the wake-up)
  to the receipt of its event by an SSE client, over ``--events`` rounds of a 20-device run (~12 KB
  each). The publisher stamps ``time.monotonic_ns()`` right after each commit (its ``Wake`` is
  called then, before it sends the Redis PUBLISH) and the client on receipt; they are matched by
  round index (CLOCK_MONOTONIC is system-wide on one host). Goals: p99 <= 25 ms with Redis wake-ups,
  <= 150 ms embedded.
- ``api_latency_ms_<N>_process(es)``: run listing and a metric query (a 1,000-round series, downsampled) at
  each of ``--rates`` requests/s in total for ``--seconds`` s, open loop (requests are sent on schedule
  whatever the earlier ones are doing, so a slow server's queueing shows in the latencies; a request
  still unanswered after 10 s counts as a timeout). Goal: p99 <= 50 ms at 200 requests/s. The
  production stack is loaded with each of ``--api-workers`` uvicorn processes (``collapipe serve
  --workers N``, which needs the Celery executor); the embedded default always serves from one
  process. With each load, ``load_average`` (1-minute, at its start) and ``cpu``: CPU milliseconds
  per answered request spent by the API's processes (and each process's share of a core), by the
  load generator and, on the production stack, by all PostgreSQL processes of the host (the load's
  three consumers of the same cores); and the cores kept busy meanwhile by everything else on the
  host (``other_processes_cores``: a loaded machine shows here).
- ``ingest``: rounds per second recorded through the run lifecycle (``lifecycle.record_round``:
  one fenced transaction per round with its outbox event, then the stack's wake-up), 1,000 rounds x
  20 devices; ``ingest_without_wake_postgres``: the same on PostgreSQL without wake-ups.
- ``frozen_outbox``: a worker held inside a round's transaction (its round and live event written, not
  committed, as one frozen by SIGSTOP), on PostgreSQL: the time another run takes to record each of
  50 rounds (``lifecycle.record_round``) and a launch takes to commit (``lifecycle.create``, as
  ``POST /api/runs`` does), 20 times, beside the same with no transaction held. Goal: no round nor
  launch delayed by more than a second (max_ms <= 1000 while held). ``--frozen-outbox-only`` runs
  just this.
- ``listing_under_streams``: the run listing (about 60 runs stored) at 50, 100 and 200 requests/s
  for 1 and 2 API processes, with 50 SSE streams open on a run going: p50/p99, answers shed (503)
  and the time the API takes to answer normally again once each load stops (``recovery_s``);
  bench/listing_load.py describes it. Goal: p99 <= 100 ms at 200 requests/s with 2 processes.
  ``--listing-only`` runs just this; ``--profile DIR`` samples the API processes' stacks meanwhile
  (bench/request_profile.py).
- ``stream_load``: the service started as ``collapipe serve`` runs it (uvicorn, access log on, and
  a Celery worker for production) with 100 SSE streams opened at once on a running run while the
  run listing is requested 50 times a second for 20 s (tests/integration/stream_load.py, what
  tests/integration/test_load.py asserts on): the listing's latencies, the rounds each stream
  received, readiness answers. Goal: listing p99 <= 250 ms.

    .venv/bin/python bench/service.py [--events 520] [--rates 200,50] [--seconds 10] [--api-workers 1,2] \
                                      [--no-stream-load] [--without NAME,...]
    .venv/bin/python bench/service.py --listing-only [--listing-rates 50,100,200] [--api-workers 1,2] \
                                      [--seconds 10] [--profile DIR]

``--without`` serves the API with those request-path optimisations switched off
(bench/tuning_toggles.py names them); bench/tuning_ablation.py measures each one's effect side by
side, and bench/compare_revisions.py runs this bench on another revision and on the working tree in
one run (the figures of both, their ratios and the goals):

    .venv/bin/python bench/compare_revisions.py 31130a8 -- --no-stream-load

Needs PostgreSQL and Redis on 127.0.0.1 (as the integration tests); uses keys under its own prefix
in Redis db 14 and throwaway databases, all removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from backend.db.base import utcnow  # noqa: E402
from backend.db.engine import make_engine, make_session_factory  # noqa: E402
from backend.db.models import Run  # noqa: E402
from backend.live.channel import ROUND, LiveEvent  # noqa: E402
from backend.runtime import lifecycle  # noqa: E402
from backend.runtime.lifecycle import Lease, RunStore  # noqa: E402
from backend.runtime.redis_wake import RedisWake  # noqa: E402
from backend.runtime.wake import NoWake, Wake  # noqa: E402
from bench import tuning_toggles  # noqa: E402
from bench.host_cpu import host_busy_s, in_group, is_postgres, process_cpu_s  # noqa: E402
from bench.listing_load import GOAL_P99_MS, bench_listing  # noqa: E402
from bench.service_processes import (  # noqa: E402
    REDIS_DB,
    bench_stream_load,
    load_average,
    prepare_database,
    start_api,
)
from collapipe_core import api  # noqa: E402
from collapipe_core.records import RoundResult  # noqa: E402
from collapipe_core.runner import Runner  # noqa: E402
from collapipe_core.sinks import MemorySink  # noqa: E402
from collapipe_core.validation import parse_config  # noqa: E402
from tests.integration.http_load import paced_load, percentiles  # noqa: E402
from tests.integration.processes import ProcessGroup, free_port  # noqa: E402
from tests.integration.sse import sse_events  # noqa: E402
from tests.workers.services import fresh_postgres_database, redis_namespace  # noqa: E402

REQUEST_TIMEOUT_S = 10.0
INGEST_ROUNDS = 1000
CLAIMANT = "bench:publisher"
WARM_EVENTS = 20  # the first events pay for connections and caches
GOALS = {
    "live_p99_ms": {"redis": 25, "embedded": 150},
    "api_p99_ms_at_200_per_s": 50,
    "stream_load_listing_p99_ms": 250,
    "listing_under_streams_p99_ms_at_200_per_s_2_processes": GOAL_P99_MS,
}


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
            V=config["scheduler"]["V"],
            num_clusters=config["network"]["num_clusters"],
            devices_per_cluster=config["network"]["devices_per_cluster"],
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
                    V=config["scheduler"]["V"],
                    num_clusters=config["network"]["num_clusters"],
                    devices_per_cluster=config["network"]["devices_per_cluster"],
                )
            )
        session.commit()
    engine.dispose()


def stack_wake(redis: tuple[str, str] | None) -> Wake:
    """What a worker of the stack calls after each commit: Redis PUBLISH, or nothing (embedded)."""
    return RedisWake(redis[0], redis[1]) if redis else NoWake()


def close_wake(wake: Wake) -> None:
    closer = getattr(wake, "close", None)
    if closer is not None:
        closer()


def bench_ingest(
    database_url: str, wake: Wake, results: list[RoundResult], config: dict[str, Any]
) -> dict[str, float]:
    """Rounds/s and device rows/s through ``lifecycle.record_round`` into ``database_url``."""
    run_id = add_running_run(database_url, config, len(results))
    engine = make_engine(database_url)
    store = RunStore(make_session_factory(engine), wake)
    lease = Lease(run_id, CLAIMANT, 3600.0)
    started = time.perf_counter()
    inserted = sum(lifecycle.record_round(store, lease, result) for result in results)
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert inserted == len(results), f"{inserted} of {len(results)} rounds stored"
    devices = sum(len(r.devices) for r in results)
    return {
        "rounds": len(results),
        "seconds": round(elapsed, 3),
        "rounds_per_s": round(len(results) / elapsed, 1),
        "device_rows_per_s": round(devices / elapsed, 1),
        "run_id": run_id,
    }


# -- live latency ---------------------------------------------------------------------------------


class StampingWake:
    """The stack's wake-up, first noting when each round's transaction committed: ``record_round``
    calls ``notify(round_index)`` right after its commit."""

    def __init__(self, inner: Wake) -> None:
        self.inner = inner
        self.committed_ns: dict[int, int] = {}

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        if isinstance(key, int):
            self.committed_ns[key] = time.monotonic_ns()
        self.inner.notify(key, events)


def publisher(
    redis: tuple[str, str] | None,
    database_url: str,
    run_id: int,
    payloads: list[dict[str, Any]],
    interval_s: float,
    stamps: Any,
) -> None:
    """Another process, as a worker: record each round on schedule, finish the run, then put the
    commit times (round index -> monotonic ns) on the ``stamps`` queue."""
    engine = make_engine(database_url)
    wake = StampingWake(stack_wake(redis))
    store = RunStore(make_session_factory(engine), wake)
    lease = Lease(run_id, CLAIMANT, 3600.0)
    start = time.monotonic()
    for n, payload in enumerate(payloads):
        time.sleep(max(0.0, start + n * interval_s - time.monotonic()))
        lifecycle.record_round(store, lease, RoundResult.from_json(payload))
    lifecycle.finish(store, lease, "succeeded", None)
    stamps.put(wake.committed_ns)
    close_wake(wake.inner)
    engine.dispose()


def bench_live(
    api_url: str,
    token: str,
    database_url: str,
    run_id: int,
    payloads: list[dict[str, Any]],
    redis: tuple[str, str] | None,
    interval_s: float,
) -> dict[str, Any]:
    """Receive the run's SSE stream while the publisher runs; commit -> receipt of each round."""
    received_ns: dict[int, int] = {}
    headers = {"Authorization": f"Bearer {token}"}
    context = multiprocessing.get_context("spawn")
    stamps = context.Queue()
    process = context.Process(
        target=publisher, args=(redis, database_url, run_id, payloads, interval_s, stamps)
    )
    load_before = load_average()
    with (
        httpx.Client(base_url=api_url, headers=headers, timeout=60) as client,
        client.stream("GET", f"/api/runs/{run_id}/events") as response,
    ):
        assert response.status_code == 200, response.read()
        process.start()  # connected: the first event cannot be missed or replayed late
        for event in sse_events(response):
            if event.kind == ROUND:
                received_ns[event.data["round"]["round"]] = time.monotonic_ns()
    committed_ns: dict[int, int] = stamps.get(timeout=60)
    process.join(timeout=60)
    latencies_ms = [
        (received_ns[n] - committed_ns[n]) / 1e6 for n in sorted(received_ns) if n in committed_ns
    ]
    warm = latencies_ms[WARM_EVENTS:]
    return {
        "events": len(warm),
        "events_missing": len(payloads) - len(received_ns),
        **percentiles(warm),
        "load_average": load_before,
    }


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
    load_before = load_average()
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
        "load_average": load_before,
        **{label: stats[path].summary() for label, path in paths.items()},
        "cpu": cpu,
    }


# -- one stack ---------------------------------------------------------------------------------------


def load_paths(run_id: int) -> dict[str, str]:
    """What the API load requests: the run listing and a downsampled 1,000-round series of ``run_id``."""
    return {
        "list_runs": "/api/runs?limit=50",
        "round_metrics": f"/api/runs/{run_id}/rounds?max_points=500&fields=latency_s&fields=objective",
    }


def fill_database(
    database_url: str, wake: Wake
) -> tuple[str, dict[str, Any], list[RoundResult], dict[str, Any]]:
    """Migrate, record a 1,000-round run (measured: ``ingest``), add 200 finished runs to list.
    Returns the admin token, the config, the rounds and the ingest figures."""
    token = prepare_database(database_url)
    config, results = round_results(INGEST_ROUNDS)
    ingest = bench_ingest(database_url, wake, results, config)
    add_runs(database_url, config, 200)
    return token, config, results, ingest


def measure_stack(
    name: str,
    env: dict[str, str],
    database_url: str,
    redis: tuple[str, str] | None,
    args: argparse.Namespace,
    log_dir: Path,
    api_workers: list[int],
) -> dict[str, Any]:
    """Ingest, then live latency (first API process count) and API load for each count in ``api_workers``."""
    wake = stack_wake(redis)
    try:
        token, config, results, ingest = fill_database(database_url, wake)
    finally:
        close_wake(wake)
    paths = load_paths(ingest["run_id"])
    report: dict[str, Any] = {"ingest": ingest}
    for workers in api_workers:
        processes = ProcessGroup(env, log_dir / f"{name}-{workers}")
        try:
            port = free_port()
            api = start_api(processes, port, workers, args.without)
            api_url = f"http://127.0.0.1:{port}"
            if "live_latency_ms" not in report:
                live_run = add_running_run(database_url, config, args.events)
                payloads = [r.to_json() for r in live_results(results, args.events)]
                report["live_latency_ms"] = bench_live(
                    api_url, token, database_url, live_run, payloads, redis, args.interval
                )
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


# -- a worker frozen inside its round's transaction --------------------------------------------------


def _timed_ms(action: Any) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _launch(factory: Any, config: dict[str, Any]) -> None:
    with factory() as session:
        run = Run(
            name="launched",
            config=config,
            total_rounds=10,
            policy="uniform",
            executor="analytic",
            V=config["scheduler"]["V"],
            num_clusters=config["network"]["num_clusters"],
            devices_per_cluster=config["network"]["devices_per_cluster"],
        )
        lifecycle.create(session, run, NoWake())
        session.commit()


def _rounds_and_launches(
    factory: Any, run_id: int, results: list[RoundResult], config: dict[str, Any]
) -> Any:
    store = RunStore(factory)
    lease = Lease(run_id, CLAIMANT, 3600.0)
    rounds = [_timed_ms(lambda r=r: lifecycle.record_round(store, lease, r)) for r in results[:50]]
    launches = [_timed_ms(lambda: _launch(factory, config)) for _ in range(20)]
    summary = {}
    for name, values in (("other_run_round_ms", rounds), ("launch_ms", launches)):
        ordered = sorted(values)
        summary[name] = {"p50": round(ordered[len(ordered) // 2], 2), "max_ms": round(ordered[-1], 2)}
    return summary


def bench_frozen_outbox(
    database_url: str, results: list[RoundResult], config: dict[str, Any]
) -> dict[str, Any]:
    """Another run's rounds and launches with no transaction held, then with a worker held inside its
    round's transaction (held at the transaction's last step before its commit)."""
    import threading

    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    report = {
        "free": _rounds_and_launches(factory, add_running_run(database_url, config, 60), results, config)
    }
    held_run = add_running_run(database_url, config, 60)
    inside, release = threading.Event(), threading.Event()
    real_crash_point = lifecycle.crash_point

    def hold(point: str, key: object) -> None:
        if point == "round-before-commit" and threading.current_thread().name == "held-worker":
            inside.set()
            release.wait(120)
        real_crash_point(point, key)

    lifecycle.crash_point = hold  # type: ignore[assignment]
    worker = threading.Thread(
        target=lifecycle.record_round,
        args=(RunStore(factory), Lease(held_run, CLAIMANT, 3600.0), results[0]),
        name="held-worker",
    )
    worker.start()
    try:
        assert inside.wait(30), "the held worker never reached its commit"
        report["held"] = _rounds_and_launches(
            factory, add_running_run(database_url, config, 60), results, config
        )
    finally:
        release.set()
        worker.join(60)
        lifecycle.crash_point = real_crash_point  # type: ignore[assignment]
        engine.dispose()
    report["goal"] = "held max_ms <= 1000 for rounds and launches"
    return report


def live_results(results: list[RoundResult], count: int) -> list[RoundResult]:
    return results[:count] if count <= len(results) else round_results(count)[1]


# -- the whole bench ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=520, help="rounds per live-latency run")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between recorded rounds")
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
    parser.add_argument(
        "--frozen-outbox-only", action="store_true", help="measure only a worker frozen in its transaction"
    )
    parser.add_argument(
        "--listing-rates",
        type=lambda text: [float(r) for r in text.split(",")],
        default=[50.0, 100.0, 200.0],
        help="run listing rates with 50 streams and a run going, requests/s",
    )
    parser.add_argument("--listing-streams", type=int, default=50, help="SSE streams open meanwhile")
    parser.add_argument("--listing-runs", type=int, default=60, help="finished runs stored to list")
    parser.add_argument(
        "--listing-only", action="store_true", help="measure only the listing with streams and a run going"
    )
    parser.add_argument("--no-listing", action="store_true", help="skip the listing with streams (~2 min)")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory: the listing scenario's API processes sample their stacks into it",
    )
    parser.add_argument(
        "--without",
        type=tuning_toggles.parse,
        default=[],
        help=f"serve with these optimisations off (comma-separated: {', '.join(tuning_toggles.TOGGLES)})",
    )
    return parser.parse_args(argv)


BASE_ENV = {"COLLAPIPE_THREADS_PER_RUN": "1", "COLLAPIPE_SSE_HEARTBEAT_S": "5"}


def production_env(database_url: str, redis_url: str, prefix: str, root: Path) -> dict[str, str]:
    return {
        **BASE_ENV,
        "COLLAPIPE_DATABASE_URL": database_url,
        "COLLAPIPE_REDIS_URL": redis_url,
        "COLLAPIPE_REDIS_KEY_PREFIX": prefix,
        "COLLAPIPE_EXECUTOR": "celery",
        "COLLAPIPE_ARTIFACT_DIR": str(root / "artifacts"),
    }


def embedded_env(database_url: str, root: Path) -> dict[str, str]:
    return {
        **BASE_ENV,
        "COLLAPIPE_DATABASE_URL": database_url,
        "COLLAPIPE_EXECUTOR": "local",
        "COLLAPIPE_ARTIFACT_DIR": str(root / "artifacts"),
    }


def listing_under_streams(args: argparse.Namespace) -> dict[str, Any]:
    return bench_listing(
        args.listing_rates,
        args.seconds,
        args.api_workers,
        args.listing_streams,
        args.listing_runs,
        args.without,
        args.profile,
        new_run=add_running_run,
        round_results=round_results,
    )


def main() -> None:
    args = parse_args()
    report: dict[str, Any] = {"args": vars(args), "load_average_at_start": load_average()}
    if args.listing_only:
        report["listing_under_streams"] = listing_under_streams(args)
        report["load_average_at_end"] = load_average()
        print(json.dumps(report, indent=2, default=str))
        return
    with fresh_postgres_database("collapipe_bench") as pg_url:
        config, results = round_results(60)
        report["frozen_outbox"] = bench_frozen_outbox(pg_url, results, config)
    if args.frozen_outbox_only:
        print(json.dumps(report, indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="collapipe-bench-") as tmp:
        root = Path(tmp)
        with (
            fresh_postgres_database("collapipe_bench") as pg_url,
            redis_namespace(REDIS_DB, "bench") as (redis_url, prefix),
        ):
            env = production_env(pg_url, redis_url, prefix, root)
            report["production_postgres_redis"] = measure_stack(
                "production", env, pg_url, (redis_url, prefix), args, root, args.api_workers
            )
        sqlite_url = f"sqlite:///{root / 'embedded.db'}"
        report["embedded_sqlite_db_tail"] = measure_stack(
            "embedded", embedded_env(sqlite_url, root), sqlite_url, None, args, root, [1]
        )
        if not args.no_listing:
            report["listing_under_streams"] = listing_under_streams(args)
        if not args.no_stream_load:
            report["stream_load"] = {
                deployment: bench_stream_load(deployment, root, args.without)
                for deployment in ("production", "embedded")
            }
    with fresh_postgres_database("collapipe_bench") as pg_url:
        config, results = round_results(INGEST_ROUNDS)
        report["ingest_without_wake_postgres"] = bench_ingest(pg_url, NoWake(), results, config)
    report["goals"] = GOALS
    report["load_average_at_end"] = load_average()
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
