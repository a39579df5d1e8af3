"""``create_app(settings)``: the FastAPI application; its executor and live wake-ups come from the
composition root (``backend.composition``). Tests may pass a dispatcher of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from backend import config_router
from backend.body_guard import BodyGuard
from backend.composition import build_runtime
from backend.db.engine import (
    make_engine,
    make_read_session_factory,
    make_session_factory,
    ping,
    pool_usage,
)
from backend.deps import SESSION_COOKIE
from backend.error_handlers import install_error_handlers
from backend.experiments.router import router as experiments_router
from backend.files.router import router as files_router
from backend.gc_tuning import settle_after_startup
from backend.live.router import router as live_router
from backend.metrics.router import router as metrics_router
from backend.metrics.series_cache import SeriesCache
from backend.monitoring import RequestMetrics, RunCollector
from backend.overload import InFlightLimit
from backend.preflight import PreflightProcess
from backend.runs.router import router as runs_router
from backend.runtime.dispatch import RunDispatcher
from backend.security_headers import SecurityHeaders
from backend.settings import Settings
from backend.studies.router import router as studies_router
from backend.users.credentials import Credentials
from backend.users.csrf import CsrfGuard
from backend.users.last_use import LastUse
from backend.users.login_guard import LoginGuard
from backend.users.router import admin_router, auth_router

FRONTEND_DIR = Path(__file__).resolve().parents[1] / "frontend"


def create_app(
    settings: Settings | None = None,
    *,
    dispatcher: RunDispatcher | None = None,
) -> FastAPI:
    settings = settings or Settings()
    engine = make_engine(
        settings.database_url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
    )
    session_factory = make_session_factory(engine)
    runtime = build_runtime(settings, session_factory, dispatcher)
    runner = dispatcher = runtime.dispatcher
    preflight = PreflightProcess(
        settings.preflight_timeout_s, settings.validate_timeout_s, settings.check_memory_bytes
    )

    last_use = LastUse(session_factory)
    read_session_factory = make_read_session_factory(engine)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        size_threads(_app, settings.max_requests_in_flight)
        await runner.start()
        preflight.warm()  # the first config check need not wait for the child's imports
        flusher = asyncio.create_task(last_use.flush_periodically(), name="collapipe-last-use")
        settle_after_startup()
        try:
            yield
        finally:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
            await to_thread.run_sync(last_use.flush)
            await runner.stop()
            await to_thread.run_sync(preflight.stop)
            await runtime.aclose()
            engine.dispose()

    app = FastAPI(
        title="CollaPipe",
        version="0.1.0",
        description="Launch, run and watch collaborative pipeline-parallel training experiments.",
        lifespan=lifespan,
        docs_url=None,  # /docs is the dashboard's own page (below): Swagger UI would load from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.workspace = settings.workspace()
    app.state.preflight = preflight
    app.state.engine = engine
    app.state.session_factory = session_factory
    app.state.last_use = last_use
    app.state.login_guard = LoginGuard(
        failures_per_user=settings.login_failures_per_user,
        failures_per_client=settings.login_failures_per_client,
        window_s=settings.login_window_s,
        max_lockout_s=settings.login_max_lockout_s,
        max_concurrent=settings.login_max_concurrent,
    )
    app.state.read_session_factory = read_session_factory
    app.state.credentials = Credentials(
        read_session_factory, last_use, settings.session_idle_s, settings.auth_cache_s
    )
    app.state.channel = runtime.channel
    app.state.wake = runtime.wake
    app.state.dispatcher = dispatcher
    app.state.series_cache = SeriesCache()
    install_error_handlers(app)
    for router in (
        auth_router,
        admin_router,
        config_router.router,
        experiments_router,
        files_router,
        live_router,  # before runs: /api/runs/events must not match /api/runs/{run_id}
        runs_router,
        metrics_router,
        studies_router,
    ):
        app.include_router(router)
    registry = CollectorRegistry()
    registry.register(RunCollector(session_factory, dispatcher.queue_depth))
    # uploads stream to disk under their own limit (backend/files)
    app.add_middleware(BodyGuard, max_body_bytes=settings.max_body_bytes, exempt_prefixes=("/api/files/",))
    app.add_middleware(CsrfGuard, session_cookie=SESSION_COOKIE)  # before any body is read
    # sheds load before anything else is done; its 503s are counted and get the security headers
    app.add_middleware(InFlightLimit, max_in_flight=settings.max_requests_in_flight)
    app.add_middleware(RequestMetrics, registry=registry)
    app.add_middleware(SecurityHeaders)  # outermost: every response, errors of the middlewares too
    _add_probes(app, registry)
    mount_frontend(app, FRONTEND_DIR)
    return app


# worker threads beyond one per admitted request: the last-use flush, the local dispatcher's ticks,
# /metrics, a pre-flight's waits
RESERVED_THREADS = 8
STREAM_THREADS = 4  # live streams' database checks at once (opening, status, access)
READINESS_THREADS = 2  # /readyz's database pings at once


def size_threads(app: FastAPI, max_in_flight: int) -> None:
    """The event loop's threadpool gets a thread for every request the InFlightLimit admits and
    ``RESERVED_THREADS`` more, so an admitted request never waits for a thread while it holds a
    database connection (a pooled connection is held from a request's first statement to the end of
    its transaction, a few thread hops later); live streams and readiness checks take threads of
    limiters of their own. Called in the lifespan: the default limiter is the running loop's."""
    to_thread.current_default_thread_limiter().total_tokens = max_in_flight + RESERVED_THREADS
    app.state.stream_threads = CapacityLimiter(STREAM_THREADS)
    app.state.readiness_threads = CapacityLimiter(READINESS_THREADS)


def _add_probes(app: FastAPI, registry: CollectorRegistry) -> None:
    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:  # no I/O: async keeps it off the thread pool
        """The process is up (no dependencies checked)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "a dependency is unavailable"}})
    async def readyz(request: Request) -> JSONResponse:
        """Ready to serve: a database connection is free within ``readiness_timeout_s`` and answers
        (a starved connection pool is not ready), and the executor can dispatch (broker reachable)."""
        checks: dict[str, Any] = {"database": "ok", "executor": "ok"}
        engine = request.app.state.engine
        timeout_s = request.app.state.settings.readiness_timeout_s
        try:
            with anyio.move_on_after(timeout_s) as waited:
                limiter = request.app.state.readiness_threads
                await to_thread.run_sync(ping, engine, abandon_on_cancel=True, limiter=limiter)
            if waited.cancelled_caught:
                checks["database"] = (
                    f"starved: no connection free within {timeout_s:g} s ({pool_usage(engine)})"
                )
        except Exception as err:
            checks["database"] = f"unreachable: {type(err).__name__}"
        problem = await to_thread.run_sync(request.app.state.dispatcher.check_ready)
        if problem is not None:
            checks["executor"] = problem
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": checks}, 200 if ready else 503
        )

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        """Prometheus text format. Unauthenticated (aggregate counts only, no names or configs)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def mount_frontend(app: FastAPI, directory: Path) -> None:
    """Serve the dashboard's static files at / once the frontend has an index.html, and its API
    reference page (drawn from /openapi.json by this server's own script) at /docs."""
    if (directory / "api-docs.html").is_file():

        @app.get("/docs", include_in_schema=False)
        async def api_docs() -> FileResponse:
            return FileResponse(directory / "api-docs.html", media_type="text/html")

    if (directory / "index.html").is_file():
        app.mount("/", StaticFiles(directory=directory, html=True), name="frontend")
