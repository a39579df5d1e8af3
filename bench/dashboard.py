"""The dashboard measured in a real headless Chromium (a benchmark, not a test); prints one JSON object.

Per stack — the embedded default (SQLite, outbox polled by the API, local executor) and, when
PostgreSQL and Redis answer, the production one (PostgreSQL, Celery worker, Redis wake-ups) — served
by a real API process on loopback:

- ``live_draw_latency_ms``: from a round's commit by the worker to its point drawn on the run view's
  charts, over ``--events`` rounds of a 10 × 5-device network (~29 KB each) at one round per
  ``--interval`` s. The bench plays the worker in another process: every round goes through
  ``lifecycle.record_round`` (one fenced transaction with its outbox event, then the stack's wake-up —
  what ``execute_run`` does), and the wall clock is noted right after each commit (the wake-up is
  called then). The page records, for each round it draws, the wall clock
  (``performance.timeOrigin + performance.now()``) right after ``Plotly.extendTraces`` returned for
  every chart on screen (off-screen charts catch up later and are not counted). Same host, same
  clock. Goal: p99 <= 100 ms. Also split: commit to receipt (the stream), receipt to the start
  of the animation frame that draws it, and that frame's redraw.
- ``live_draw_latency_real_worker_ms``: the same, for an analytic run executed by the stack's own
  executor (the local runner's child process, or a Celery worker process), measured from
  ``run_events.created_at``: the worker's wall clock as it appends the round's event, the last
  write of the round's transaction (a few ms before its commit). Goal: p99 <= 100 ms via Redis.
- ``render_1000x50``: a finished run of 1,000 rounds × 50 devices, stored directly through the
  backend's ``insert_round``; time from navigating to the run (app loaded) until every chart is
  drawn and painted, over ``--repeat`` visits, the longest main-thread task during those visits
  (``longtask`` entries: what a user would feel as a freeze), and a cold load of the page (plotly.js
  parsed, login checked) to the same point. Goal: <= 2 s.

    .venv/bin/python bench/dashboard.py [--events 300] [--interval 0.05] [--real-rounds 120] [--repeat 3]
        [--stacks embedded,redis]

Against another revision, both in one run (bench/compare_revisions.py: the figures side by side,
their ratios and the goals):

    .venv/bin/python bench/compare_revisions.py 31130a8 --bench dashboard -- --stacks redis
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playwright.sync_api import Browser, Page, sync_playwright  # noqa: E402
from sqlalchemy import select  # noqa: E402

from backend.db.base import utcnow  # noqa: E402
from backend.db.engine import make_engine, make_session_factory  # noqa: E402
from backend.db.models import Run, RunEvent  # noqa: E402
from backend.live.channel import ROUND, LiveEvent  # noqa: E402
from backend.metrics.ingest_repository import insert_round  # noqa: E402
from backend.runtime import lifecycle  # noqa: E402
from backend.runtime.lifecycle import Lease, RunStore  # noqa: E402
from backend.runtime.redis_wake import RedisWake  # noqa: E402
from backend.runtime.wake import NoWake, Wake  # noqa: E402
from collapipe_core import api  # noqa: E402
from collapipe_core.records import RoundResult  # noqa: E402
from collapipe_core.runner import Runner  # noqa: E402
from collapipe_core.sinks import MemorySink  # noqa: E402
from collapipe_core.validation import parse_config  # noqa: E402
from tests.e2e.conftest import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from tests.e2e.server import PASSWORDS, USERNAMES, Server, create_users, free_port, running_server  # noqa: E402

CLAIMANT = "bench:dashboard"
NUM_CLUSTERS, DEVICES_PER_CLUSTER = 10, 5
WARMUP_EVENTS = 10
REDIS_DB = 15
LONGTASKS = """
window.__longTasks = [];
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__longTasks.push(e.duration);
  }).observe({ type: 'longtask', buffered: true });
} catch (e) { /* no longtask support */ }
"""


# -- data ------------------------------------------------------------------------------------------


def network_config(rounds: int) -> dict[str, Any]:
    """The paper-transformer network widened to 10 clusters × 5 devices, analytic executor."""
    data = api.load_config(REPO / "examples" / "paper-transformer.yaml").model_dump(
        mode="json", by_alias=True
    )
    data["name"] = f"bench {NUM_CLUSTERS}x{DEVICES_PER_CLUSTER}"
    data["executor"] = "analytic"
    data["training"]["rounds"] = rounds
    data["network"]["num_clusters"] = NUM_CLUSTERS
    data["network"]["devices_per_cluster"] = DEVICES_PER_CLUSTER
    return data


def round_results(rounds: int) -> tuple[dict[str, Any], list[RoundResult]]:
    config = network_config(rounds)
    sink = MemorySink()
    Runner(parse_config(config), sink).run()
    return config, sink.results


def add_run(database_url: str, config: dict[str, Any], rounds: int, status: str) -> int:
    """A run row: ``running`` under the bench's lease (no dispatcher touches it) or ``succeeded``."""
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        run = Run(
            name=config["name"],
            config=config,
            status=status,
            total_rounds=rounds,
            rounds_done=0,
            policy=config["scheduler"]["policy"],
            executor="analytic",
            V=config["scheduler"]["V"],
            num_clusters=config["network"]["num_clusters"],
            devices_per_cluster=config["network"]["devices_per_cluster"],
            lease_owner=CLAIMANT if status == "running" else None,
            lease_expires_at=utcnow() + timedelta(hours=1) if status == "running" else None,
            started_at=utcnow(),
            finished_at=None if status == "running" else utcnow(),
            attempt=1,
        )
        session.add(run)
        session.commit()
        run_id = run.id
    engine.dispose()
    return run_id


def store_finished_run(database_url: str, config: dict[str, Any], results: list[RoundResult]) -> int:
    """A succeeded run whose rounds are inserted directly with the backend's insert_round."""
    run_id = add_run(database_url, config, len(results), "succeeded")
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        for result in results:
            insert_round(session, run_id, result)
        run = session.get(Run, run_id)
        assert run is not None
        run.rounds_done = len(results)
        session.commit()
    engine.dispose()
    return run_id


# -- the bench as the worker -----------------------------------------------------------------------


class StampingWake:
    """The stack's wake-up, first noting the wall clock (ms) at which each round's transaction
    committed: ``record_round`` calls ``notify(round_index)`` right after its commit."""

    def __init__(self, inner: Wake) -> None:
        self.inner = inner
        self.committed_unix_ms: dict[int, float] = {}

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        if isinstance(key, int):
            self.committed_unix_ms[key] = time.time_ns() / 1e6
        self.inner.notify(key, events)


def publisher(
    database_url: str,
    redis: tuple[str, str] | None,
    run_id: int,
    payloads: list[dict[str, Any]],
    interval_s: float,
    stamps: Any,
) -> None:
    """Another process, as a worker: record each round on schedule, finish the run, then put the
    commit times (round index -> wall clock ms) on the ``stamps`` queue."""
    inner: Wake = RedisWake(redis[0], redis[1]) if redis is not None else NoWake()
    wake = StampingWake(inner)
    engine = make_engine(database_url)
    store = RunStore(make_session_factory(engine), wake)
    lease = Lease(run_id, CLAIMANT, 3600.0)
    start = time.monotonic()
    for n, payload in enumerate(payloads):
        time.sleep(max(0.0, start + n * interval_s - time.monotonic()))
        lifecycle.record_round(store, lease, RoundResult.from_json(payload))
    lifecycle.finish(store, lease, "succeeded", None)
    stamps.put(wake.committed_unix_ms)
    if isinstance(inner, RedisWake):
        inner.close()
    engine.dispose()


# -- the browser -----------------------------------------------------------------------------------


def signed_in_page(browser: Browser, url: str) -> Page:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(LONGTASKS)
    response = context.request.post(
        f"{url}/api/auth/login", data={"username": USERNAMES["admin"], "password": PASSWORDS["admin"]}
    )
    assert response.ok, response.text()
    return context.new_page()


def open_run(page: Page, url: str, run_id: int) -> None:
    page.goto(f"{url}/#/runs/{run_id}")
    page.wait_for_selector("[data-ready='true']", state="attached", timeout=60_000)


def wait_for_draws(page: Page, run_id: int, count: int, timeout_s: float) -> list[dict[str, Any]]:
    # a function, not an expression: the dashboard's CSP forbids eval, which an expression needs
    script = f"() => window.collapipeStats.draws.filter(d => d.runId === {run_id}).length >= {count}"
    page.wait_for_function(script, timeout=timeout_s * 1000, polling=100)
    draws: list[dict[str, Any]] = page.evaluate(
        f"window.collapipeStats.draws.filter(d => d.runId === {run_id})"
    )
    return draws


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 1),
        "p90": at(0.90),
        "p99": at(0.99),
        "max": round(ordered[-1], 1),
    }


def measure_live_stamped(
    browser: Browser, url: str, database_url: str, redis: tuple[str, str] | None, args: argparse.Namespace
) -> dict[str, Any]:
    config, results = round_results(args.events)
    run_id = add_run(database_url, config, args.events, "running")
    page = signed_in_page(browser, url)
    open_run(page, url, run_id)
    page.wait_for_function(
        "() => document.querySelector('.page-head').textContent.includes('● live')", timeout=30_000
    )
    context = multiprocessing.get_context("spawn")
    payloads = [r.to_json() for r in results]
    stamps = context.Queue()
    process = context.Process(
        target=publisher, args=(database_url, redis, run_id, payloads, args.interval, stamps)
    )
    load_before = round(os.getloadavg()[0], 2)
    process.start()
    try:
        draws = wait_for_draws(page, run_id, args.events, timeout_s=args.events * args.interval + 60)
        committed: dict[int, float] = stamps.get(timeout=60)
    finally:
        process.join(timeout=60)
    stamped = [
        {**d, "committedUnixMs": committed[d["round"]]}
        for d in sorted(draws, key=lambda d: d["round"])
        if d["round"] in committed
    ][WARMUP_EVENTS:]
    flushes = page.evaluate("window.collapipeStats.flushes")
    page.context.close()
    return {
        "rounds": args.events,
        "interval_s": args.interval,
        "devices": NUM_CLUSTERS * DEVICES_PER_CLUSTER,
        "flushes": flushes,
        "load_average": load_before,
        **percentiles([d["drawnUnixMs"] - d["committedUnixMs"] for d in stamped]),
        "commit_to_received": percentiles([d["receivedUnixMs"] - d["committedUnixMs"] for d in stamped]),
        "received_to_drawn": percentiles([d["drawnUnixMs"] - d["receivedUnixMs"] for d in stamped]),
        # received_to_drawn split: waiting for the frame (and for whatever task runs before it), then
        # the frame's own redraw of the charts on screen
        "received_to_frame": percentiles([d["flushStartUnixMs"] - d["receivedUnixMs"] for d in stamped]),
        "frame_to_drawn": percentiles([d["drawnUnixMs"] - d["flushStartUnixMs"] for d in stamped]),
    }


def _appended_unix_ms(database_url: str, run_id: int) -> dict[str, float]:
    """Event id -> ``run_events.created_at`` (ms) of the run's round events."""
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        rows = session.execute(
            select(RunEvent.id, RunEvent.created_at).where(RunEvent.run_id == run_id, RunEvent.kind == ROUND)
        ).all()
    engine.dispose()
    return {str(event_id): created.timestamp() * 1000 for event_id, created in rows}


def measure_live_real_worker(browser: Browser, server: Server, rounds: int) -> dict[str, Any]:
    """An analytic run executed by the stack itself; from each round event's ``created_at``."""
    config = network_config(rounds)
    page = signed_in_page(browser, server.url)
    with server.client() as client:
        created = client.post("/api/runs", json={"config": config, "name": "bench real worker"})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
    load_before = round(os.getloadavg()[0], 2)
    open_run(page, server.url, run_id)
    draws = wait_for_draws(page, run_id, rounds, timeout_s=180)
    page.context.close()
    appended = _appended_unix_ms(server.database_url, run_id)
    ordered = sorted((d for d in draws if d["eventId"] in appended), key=lambda d: d["round"])
    stamped = [{**d, "appendedUnixMs": appended[d["eventId"]]} for d in ordered][WARMUP_EVENTS:]
    return {
        "rounds": rounds,
        "published_at": "run_events.created_at",
        "load_average": load_before,
        **percentiles([d["drawnUnixMs"] - d["appendedUnixMs"] for d in stamped]),
        "appended_to_received": percentiles([d["receivedUnixMs"] - d["appendedUnixMs"] for d in stamped]),
        "received_to_drawn": percentiles([d["drawnUnixMs"] - d["receivedUnixMs"] for d in stamped]),
    }


RENDER_SCRIPT = """async (runId) => {
  window.__longTasks.length = 0;
  const t0 = performance.now();
  location.hash = '#/runs/' + runId;
  await new Promise((resolve) => {
    const check = () => document.querySelector("main [data-ready='true']") ? resolve() : setTimeout(check, 5);
    check();
  });
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  const total = performance.now() - t0;
  await new Promise((resolve) => setTimeout(resolve, 100));
  const longest = Math.max(0, ...window.__longTasks);
  return { total_ms: total, view: window.collapipeStats.views.run, longest_task_ms: longest };
}"""


def measure_render(browser: Browser, url: str, run_id: int, repeat: int) -> dict[str, Any]:
    page = signed_in_page(browser, url)
    page.goto(f"{url}/#/runs")
    page.wait_for_selector("tbody tr[data-run-id]", timeout=60_000)
    visits = []
    for _ in range(repeat):
        visits.append(page.evaluate(RENDER_SCRIPT, run_id))
        page.evaluate("location.hash = '#/runs'")
        page.wait_for_selector("tbody tr[data-run-id]", timeout=60_000)
    page.context.close()
    page = signed_in_page(browser, url)  # a cold load: a new page parses plotly.js and checks the login
    page.goto(f"{url}/#/runs/{run_id}")
    page.wait_for_selector("main [data-ready='true']", state="attached", timeout=60_000)
    traces = page.evaluate(
        "[...document.querySelectorAll('[data-chart]')].reduce((n, el) => n + (el.data?.length || 0), 0)"
    )
    points = page.evaluate(
        "[...document.querySelectorAll('[data-chart]')]"
        ".reduce((n, el) => n + (el.data || []).reduce((m, t) => m + (t.x?.length || 0), 0), 0)"
    )
    cold_ms = page.evaluate(
        "new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
    )
    page.context.close()
    totals = [v["total_ms"] for v in visits]
    return {
        "rounds": 1000,
        "devices": NUM_CLUSTERS * DEVICES_PER_CLUSTER,
        "traces_drawn": traces,
        "points_drawn": points,
        "navigate_to_drawn_ms": {"median": round(statistics.median(totals), 1), "max": round(max(totals), 1)},
        "fetch_done_ms_median": round(statistics.median(v["view"]["fetchMs"] for v in visits), 1),
        "longest_main_thread_task_ms": round(max(v["longest_task_ms"] for v in visits), 1),
        "cold_page_load_to_drawn_ms": round(cold_ms, 1),
    }


# -- the stacks ------------------------------------------------------------------------------------


def measure_stack(
    browser: Browser, server: Server, redis: tuple[str, str] | None, args: argparse.Namespace
) -> dict[str, Any]:
    config, results = round_results(1000)
    render_run = store_finished_run(server.database_url, config, results)
    return {
        "live_draw_latency_ms": measure_live_stamped(browser, server.url, server.database_url, redis, args),
        "live_draw_latency_real_worker_ms": measure_live_real_worker(browser, server, args.real_rounds),
        "render_1000x50": measure_render(browser, server.url, render_run, args.repeat),
    }


@contextlib.contextmanager
def production_stack(root: Path) -> Iterator[tuple[Server, tuple[str, str]]]:
    """PostgreSQL + Redis + a Celery worker + the API (uvicorn), all on loopback."""
    from backend.users.service import bootstrap
    from tests.integration.processes import ProcessGroup
    from tests.workers.services import delete_keys, fresh_postgres_database

    redis_url = f"redis://127.0.0.1:6379/{REDIS_DB}"
    prefix = f"bench-dashboard-{secrets.token_hex(4)}:"
    with fresh_postgres_database("collapipe_bench_dashboard") as database_url:
        token = secrets.token_urlsafe(24)
        engine = make_engine(database_url)
        with make_session_factory(engine)() as session:
            bootstrap(session, token)
            session.commit()
        engine.dispose()
        env = {
            "COLLAPIPE_DATABASE_URL": database_url,
            "COLLAPIPE_REDIS_URL": redis_url,
            "COLLAPIPE_REDIS_KEY_PREFIX": prefix,
            "COLLAPIPE_EXECUTOR": "celery",
            "COLLAPIPE_ARTIFACT_DIR": str(root / "artifacts"),
            "COLLAPIPE_DATA_DIR": str(root / "data"),
            "COLLAPIPE_THREADS_PER_RUN": "1",
            "COLLAPIPE_SSE_HEARTBEAT_S": "5",
            "OMP_NUM_THREADS": "1",
        }
        processes = ProcessGroup(env, root / "logs")
        port = free_port()
        try:
            api_process = processes.start_api(port)
            processes.start_worker(concurrency=1)
            server = Server(
                f"http://127.0.0.1:{port}",
                token,
                api_process.process,
                api_process.log_path,
                database_url,
                root / "data",
            )
            create_users(server)
            yield server, (redis_url, prefix)
        finally:
            processes.close()
            delete_keys(redis_url, prefix)


def production_unavailable() -> str | None:
    try:
        import psycopg
        import redis

        from tests.workers.services import PG_ADMIN_URL

        redis.Redis.from_url(f"redis://127.0.0.1:6379/{REDIS_DB}").ping()
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            pass
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300, help="stamped rounds per live-latency run")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between published rounds")
    parser.add_argument("--real-rounds", type=int, default=120, help="rounds of the run the stack executes")
    parser.add_argument("--repeat", type=int, default=3, help="visits of the 1,000-round run")
    parser.add_argument("--stacks", default="embedded,redis", help="embedded, redis or both")
    args = parser.parse_args()
    stacks = set(args.stacks.split(","))
    report: dict[str, Any] = {"goals": {"live_p99_ms": 100, "render_s": 2.0}, "args": vars(args)}
    report["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="collapipe-bench-dashboard-") as tmp, sync_playwright() as pw:
        root = Path(tmp)
        (root / "production").mkdir()
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True)
        try:
            if "embedded" in stacks:
                (root / "embedded").mkdir()
                with running_server(root / "embedded") as server:
                    report["embedded_sqlite"] = measure_stack(browser, server, None, args)
            if "redis" in stacks:
                problem = production_unavailable()
                if problem is not None:
                    report["postgres_redis_celery"] = {"skipped": problem}
                else:
                    try:
                        with production_stack(root / "production") as (server, redis):
                            report["postgres_redis_celery"] = measure_stack(browser, server, redis, args)
                    except Exception as err:  # the workers package is still being built: report, do not hide
                        report["postgres_redis_celery"] = {"failed": f"{type(err).__name__}: {err}"}
        finally:
            browser.close()
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
