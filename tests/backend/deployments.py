"""The two deployments the API suite runs on, and a dispatcher that holds runs until a test releases them.

- ``embedded`` (what ``collapipe serve`` runs by default): a fresh SQLite file per test, the local
  dispatcher (one spawned process per run) and the live channel that tails the run_events table.
- ``production``: one migrated PostgreSQL database per test session (emptied before each test), the
  Celery dispatcher on a Redis broker, live wake-ups through Redis, and one real Celery worker
  process started once per session. A Redis key prefix of this session keeps its queue, wake-ups and
  dispatch marks and wake-ups apart from any other session on the same Redis.

Between production tests the worker must be idle, or a message of the previous test could claim a
run of the next one (ids restart after the truncation): ``ProductionStack.quiesce`` asks every
active run to stop and waits until no dispatch mark is left (the worker clears a run's mark when
its task returns, whatever the outcome).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from fastapi import FastAPI
from sqlalchemy import text

from backend.db.engine import make_engine
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.dispatch import RunDispatcher
from backend.runtime.lifecycle import RunStore
from backend.runtime.local import LocalDispatcher
from tests.backend.builders import TEST_POLICIES
from tests.deployment_params import EMBEDDED
from tests.integration.processes import REPO, ProcessGroup, Service, wait_until
from tests.workers.services import delete_keys, fresh_postgres_database, redis_namespace, truncate_all

REDIS_DB = 12  # tests/integration uses 13; prefixes keep sessions apart in any case
LEASE_S = 30.0
QUIESCE_TIMEOUT_S = 90.0


@dataclass
class ProductionStack:
    """PostgreSQL database, Redis namespace and Celery worker shared by a session's production tests."""

    database_url: str
    redis_url: str
    redis_prefix: str
    artifact_dir: Path
    processes: ProcessGroup
    worker: Service

    def reset(self) -> None:
        """Empty every table (ids restart at 1) and this session's Redis keys; the worker must be up."""
        assert self.worker.alive(), f"the Celery worker died:\n{self.processes.logs()}"
        truncate_all(self.database_url)
        delete_keys(self.redis_url, self.redis_prefix)

    def dispatch_marks(self) -> list[str]:
        """Runs with a message in the broker or in the worker (``run:<id>:dispatched`` keys)."""
        client: Any = redis.Redis.from_url(self.redis_url, decode_responses=True)
        try:
            return sorted(client.scan_iter(match=f"{self.redis_prefix}run:*:dispatched", count=1000))
        finally:
            client.close()

    def quiesce(self, timeout_s: float = QUIESCE_TIMEOUT_S) -> None:
        """Ask every queued or running run to stop, then wait until the worker holds no message."""
        engine = make_engine(self.database_url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text("UPDATE runs SET cancel_requested = true WHERE status IN ('queued', 'running')")
                )
        finally:
            engine.dispose()
        wait_until(
            lambda: not self.dispatch_marks(),
            timeout_s,
            lambda: f"still dispatched: {self.dispatch_marks()}\n{self.processes.logs()[-4000:]}",
            poll_s=0.05,
        )


def worker_env(stack_database_url: str, redis_url: str, prefix: str, artifact_dir: Path) -> dict[str, str]:
    """The production services' environment (API settings the Celery dispatcher and worker share)."""
    return {
        "COLLAPIPE_DATABASE_URL": stack_database_url,
        "COLLAPIPE_EXECUTOR": "celery",
        "COLLAPIPE_REDIS_URL": redis_url,
        "COLLAPIPE_REDIS_KEY_PREFIX": prefix,
        "COLLAPIPE_ARTIFACT_DIR": str(artifact_dir),
        "COLLAPIPE_LEASE_S": str(LEASE_S),
        "COLLAPIPE_THREADS_PER_RUN": "1",
        "OMP_NUM_THREADS": "1",
        # the test policies are registered as an operator would, and importable in the worker
        "COLLAPIPE_POLICIES": json.dumps(TEST_POLICIES),
        "PYTHONPATH": str(REPO),
    }


@contextlib.contextmanager
def production_stack(root: Path) -> Iterator[ProductionStack]:
    """Create the database and Redis namespace, start one Celery worker; tear everything down after."""
    with (
        fresh_postgres_database("collapipe_api") as database_url,
        redis_namespace(REDIS_DB, "api") as (redis_url, prefix),
    ):
        artifact_dir = root / "artifacts"
        processes = ProcessGroup(worker_env(database_url, redis_url, prefix, artifact_dir), root / "logs")
        try:
            worker = processes.start_worker(concurrency=1)
            yield ProductionStack(database_url, redis_url, prefix, artifact_dir, processes, worker)
        finally:
            processes.close()


def real_dispatcher(deployment: str, app: FastAPI) -> RunDispatcher:
    """The executor ``app`` would use in ``deployment`` (bound to the app's database)."""
    state = app.state
    if deployment == EMBEDDED:
        return LocalDispatcher(state.settings, RunStore(state.session_factory))
    return CeleryRunExecutor.from_settings(state.settings, state.session_factory)


@dataclass
class RecordingDispatcher:
    """Remembers what was enqueued and holds it: nothing runs until ``release()``.

    Tests of the API's own rules (launch, cancel, resume, fork, delete of queued runs) need runs to stay
    where the test put them. ``real`` is the deployment's executor (set by the ``app_factory``
    fixture): after ``release()`` every queued run, held or new, really executes there (a spawned
    process for ``embedded``, the Celery worker for ``production``). Without ``real`` it only records.
    """

    enqueued: list[int] = field(default_factory=list)
    ready_problem: str | None = None
    real: RunDispatcher | None = None
    released: bool = False
    _loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        if self.real is not None:
            await self.real.stop()

    def enqueue(self, run_id: int) -> None:
        self.enqueued.append(run_id)
        if self.released and self.real is not None:
            self.real.enqueue(run_id)

    def release(self) -> None:
        """Start the real executor (in the app's event loop) and hand it every run recorded so far."""
        if self.released:
            return
        if self.real is None or self._loop is None:
            raise RuntimeError("release() needs a started app whose fixture set the real dispatcher")
        future: Future[None] = asyncio.run_coroutine_threadsafe(self.real.start(), self._loop)
        future.result(timeout=30)
        self.released = True
        for run_id in dict.fromkeys(self.enqueued):  # a repeated message is skipped by the run's lease
            self.real.enqueue(run_id)

    def check_ready(self) -> str | None:
        if self.ready_problem is not None:
            return self.ready_problem
        return self.real.check_ready() if self.released and self.real is not None else None

    def queue_depth(self) -> int | None:
        return None


def wait_terminal(session_factory: Any, run_id: int, timeout_s: float = 120.0) -> str:
    """Poll the run's row until it succeeded, failed or was cancelled; returns that status."""
    from backend.db.models import Run

    deadline = time.monotonic() + timeout_s
    while True:
        with session_factory() as session:
            run = session.get(Run, run_id)
            status = run.status if run is not None else "missing"
            error = run.error if run is not None else None
        if status in ("succeeded", "failed", "cancelled"):
            return str(status)
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} is still {status} after {timeout_s} s (error: {error})")
        time.sleep(0.05)
