"""The dashboard measured in a real headless Chromium (a benchmark, not a test); prints one JSON object.

Per stack — the embedded default (SQLite, DB-tailing live stream, local executor) and, when
PostgreSQL, Redis and the workers package answer, the production one (PostgreSQL, Redis Streams,
Celery) — served by a real API process on loopback:

- ``live_draw_latency_ms``: from a round's publication by the worker to its point drawn on the run
  view's charts, over ``--events`` rounds of a 10 × 5-device network (~29 KB each) at one round per
  ``--interval`` s. The bench plays the worker in another process: every round goes through the
  backend's ``SqlRoundSink`` (one fenced transaction, then the publish — what ``execute_run`` does)
  on the stack's live channel, wrapped so that the event carries ``published_unix_ms``, the wall
  clock just before ``publish``. The page records, for each round it draws, the wall clock
  (``performance.timeOrigin + performance.now()``) right after ``Plotly.extendTraces`` returned for
  every chart on screen (off-screen charts catch up later and are not counted). Same host, same
  clock. Goal: p99 <= 100 ms. Also split: publication to receipt (the stream), receipt to the start
  of the animation frame that draws it, and that frame's redraw.
- ``live_draw_latency_real_worker_ms``: the same, for an analytic run executed by the stack's own
  executor (the local runner's child process, or a Celery worker), measured from the publication
  time the channel itself records: ``run_events.created_at`` (embedded: the row is the event) or
  the Redis stream id (milliseconds of the Redis clock at XADD).
- ``render_1000x50``: a finished run of 1,000 rounds × 50 devices, stored directly through the
  backend's ``insert_round``; time from navigating to the run (app loaded) until every chart is
  drawn and painted, over ``--repeat`` visits, the longest main-thread task during those visits
  (``longtask`` entries: what a user would feel as a freeze), and a cold load of the page (plotly.js
  parsed, login checked) to the same point. Goal: <= 2 s.

    .venv/bin/python bench/dashboard.py [--events 300] [--interval 0.05] [--repeat 3]
        [--stacks embedded,redis]
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
from collections.abc import Iterator, Mapping
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
from backend.live.channel import ROUND, STATUS, LiveChannel, LiveEvent, status_payload  # noqa: E402
from backend.metrics.ingest_repository import insert_round  # noqa: E402
from backend.runs import lease_repository as leases  # noqa: E402
from backend.runs.sink import SqlRoundSink  # noqa: E402
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


class StampingChannel:
    """A LiveChannel that stamps ``published_unix_ms`` (wall clock) into round events at publish."""

    def __init__(self, inner: LiveChannel) -> None:
        self.inner = inner

    def publish(self, run_id: int, kind: str, data: Mapping[str, Any]) -> str:
        if kind == ROUND:
            data = {**data, "published_unix_ms": time.time_ns() / 1e6}
        return self.inner.publish(run_id, kind, data)

    async def read(self, run_id: int | None, after: str | None, block_s: float) -> list[LiveEvent]:
        return await self.inner.read(run_id, after, block_s)

    async def head(self, run_id: int | None) -> str:
        return await self.inner.head(run_id)

    def close(self) -> None:
        self.inner.close()


def _channel(database_url: str, redis: tuple[str, str] | None) -> LiveChannel:
    if redis is not None:
        from workers.redis_channel import RedisStreamChannel

        return RedisStreamChannel(redis[0], prefix=redis[1])
    from backend.live.db_channel import DbEventChannel

    return DbEventChannel(make_session_factory(make_engine(database_url)))


def publisher(
    database_url: str,
    redis: tuple[str, str] | None,
    run_id: int,
    payloads: list[dict[str, Any]],
    interval_s: float,
) -> None:
    """Another process, as a worker: store and publish each round on schedule, then finish the run."""
    channel = StampingChannel(_channel(database_url, redis))
    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    sink = SqlRoundSink(factory, run_id, CLAIMANT, channel, lease_s=3600)
    start = time.monotonic()
    for n, payload in enumerate(payloads):
        time.sleep(max(0.0, start + n * interval_s - time.monotonic()))
        sink.write_round(RoundResult.from_json(payload))
    with factory() as session:
        leases.finish_run(session, run_id, CLAIMANT, "succeeded", None, utcnow())
        session.commit()
    channel.publish(run_id, STATUS, status_payload(run_id, "succeeded", len(payloads), len(payloads), None))
    channel.close()
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
    script = f"window.collapipeStats.draws.filter(d => d.runId === {run_id}).length >= {count}"
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
        "document.querySelector('.page-head').textContent.includes('● live')", timeout=30_000
    )
    context = multiprocessing.get_context("spawn")
    payloads = [r.to_json() for r in results]
    process = context.Process(target=publisher, args=(database_url, redis, run_id, payloads, args.interval))
    process.start()
    try:
        draws = wait_for_draws(page, run_id, args.events, timeout_s=args.events * args.interval + 60)
    finally:
        process.join(timeout=60)
    stamped = [d for d in draws if d["publishedUnixMs"] is not None][WARMUP_EVENTS:]
    flushes = page.evaluate("window.collapipeStats.flushes")
    page.context.close()
    return {
        "rounds": args.events,
        "interval_s": args.interval,
        "devices": NUM_CLUSTERS * DEVICES_PER_CLUSTER,
        "flushes": flushes,
        **percentiles([d["drawnUnixMs"] - d["publishedUnixMs"] for d in stamped]),
        "publish_to_received": percentiles([d["receivedUnixMs"] - d["publishedUnixMs"] for d in stamped]),
        "received_to_drawn": percentiles([d["drawnUnixMs"] - d["receivedUnixMs"] for d in stamped]),
        # received_to_drawn split: waiting for the frame (and for whatever task runs before it), then
        # the frame's own redraw of the charts on screen
        "received_to_frame": percentiles([d["flushStartUnixMs"] - d["receivedUnixMs"] for d in stamped]),
        "frame_to_drawn": percentiles([d["drawnUnixMs"] - d["flushStartUnixMs"] for d in stamped]),
    }


def _published_ms_embedded(database_url: str, run_id: int) -> dict[str, float]:
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        rows = session.execute(
            select(RunEvent.id, RunEvent.created_at).where(RunEvent.run_id == run_id, RunEvent.kind == ROUND)
        ).all()
    engine.dispose()
    return {str(event_id): created.timestamp() * 1000 for event_id, created in rows}


def measure_live_real_worker(
    browser: Browser, server: Server, redis: tuple[str, str] | None, rounds: int
) -> dict[str, Any]:
    """An analytic run executed by the stack itself; publication time from the channel's own record."""
    config = network_config(rounds)
    page = signed_in_page(browser, server.url)
    with server.client() as client:
        created = client.post("/api/runs", json={"config": config, "name": "bench real worker"})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
    open_run(page, server.url, run_id)
    draws = wait_for_draws(page, run_id, rounds, timeout_s=180)
    page.context.close()
    if redis is None:
        published = _published_ms_embedded(server.database_url, run_id)
        latencies = [d["drawnUnixMs"] - published[d["eventId"]] for d in draws if d["eventId"] in published]
        source = "run_events.created_at"
    else:
        latencies = [d["drawnUnixMs"] - float(d["eventId"].split("-")[0]) for d in draws]
        source = "Redis stream id (ms)"
    return {"rounds": rounds, "published_at": source, **percentiles(latencies[WARMUP_EVENTS:])}


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
        "live_draw_latency_real_worker_ms": measure_live_real_worker(
            browser, server, redis, args.real_rounds
        ),
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
            "COLLAPIPE_DISPATCHER_FACTORY": "workers.executor:make_dispatcher",
            "COLLAPIPE_CHANNEL_FACTORY": "workers.redis_channel:make_channel",
            "COLLAPIPE_ARTIFACT_DIR": str(root / "artifacts"),
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
                f"http://127.0.0.1:{port}", token, api_process.process, api_process.log_path, database_url
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

        import workers.redis_channel  # noqa: F401
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
