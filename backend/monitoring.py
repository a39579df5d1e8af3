"""Prometheus metrics at /metrics: requests by route and status, runs by status, queue depth,
rounds stored per second (1-minute average). Each app has its own registry.

Run figures are read from the database at scrape time, so they are right whichever process (local
child, Celery worker on another host) wrote the rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.db.base import utcnow
from backend.db.engine import SessionFactory
from backend.db.models import RUN_STATUSES
from backend.metrics import repository as metrics_repo
from backend.runs import repository as runs_repo

ROUNDS_WINDOW_S = 60.0


class RunCollector(Collector):
    def __init__(self, session_factory: SessionFactory, broker_depth: Callable[[], int | None]) -> None:
        self.session_factory = session_factory
        self.broker_depth = broker_depth

    def collect(self) -> Iterator[Metric]:
        with self.session_factory() as session:
            counts = runs_repo.count_by_status(session)
            since = utcnow() - timedelta(seconds=ROUNDS_WINDOW_S)
            recent = metrics_repo.rounds_stored_since(session, since)
        by_status = GaugeMetricFamily("collapipe_runs", "runs by status", labels=["status"])
        for status in RUN_STATUSES:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status
        depth = GaugeMetricFamily("collapipe_queue_depth", "runs waiting to start", labels=["queue"])
        depth.add_metric(["database"], counts.get("queued", 0))
        broker = self.broker_depth()
        if broker is not None:
            depth.add_metric(["broker"], broker)
        yield depth
        yield GaugeMetricFamily(
            "collapipe_rounds_per_second",
            f"rounds stored per second over the last {ROUNDS_WINDOW_S:.0f} s, all runs",
            value=recent / ROUNDS_WINDOW_S,
        )


class RequestMetrics:
    """ASGI middleware: counts and times HTTP requests by route template, method and status."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "collapipe_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry
        )
        self.latency = Histogram(
            "collapipe_http_request_duration_seconds",
            "time to the response start",
            ["method", "route"],
            registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                route = _route(scope)
                self.latency.labels(scope["method"], route).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.requests.labels(scope["method"], _route(scope), str(status)).inc()


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "(unmatched)"
