"""The service's processes as bench/service.py starts them: a prepared database, the API (uvicorn,
optionally with optimisations off: bench/tuning_toggles.py), and the 100-streams scenario's service
started as ``collapipe serve`` starts it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from backend.db.engine import make_engine, make_session_factory
from backend.migrations import upgrade_to_head
from backend.users.service import bootstrap
from bench import request_profile, tuning_toggles
from tests.backend.builders import PACED_POLICY, TEST_POLICIES, tiny_config
from tests.integration.processes import BIN, ProcessGroup, Service, free_port, wait_until
from tests.integration.stream_load import stream_load
from tests.workers.services import fresh_postgres_database, redis_namespace

REPO = Path(__file__).resolve().parents[1]
REDIS_DB = 14


def load_average() -> float:
    """The host's 1-minute load average (other users' jobs show here)."""
    return round(os.getloadavg()[0], 2)


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


def start_api(
    processes: ProcessGroup,
    port: int,
    workers: int,
    without: list[str],
    log_level: str = "warning",
    profile_dir: Path | None = None,
) -> Service:
    """uvicorn as ``collapipe serve [--workers N]`` runs it; the app of bench/tuning_toggles.py when
    optimisations are switched off (``without``). ``log_level="info"`` keeps the access log on, as
    ``collapipe serve`` does; the API measurements run without it, as the tests do. With
    ``profile_dir`` each API process samples its own stacks into it (bench/request_profile.py)."""
    factory = "bench.tuning_toggles:create_app" if without else "backend.app:create_app"
    if profile_dir is not None:
        factory = "bench.request_profile:create_app"
    argv = [str(BIN / "uvicorn"), factory, "--factory", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", log_level, "--timeout-graceful-shutdown", "3"]
    if workers > 1:
        argv += ["--workers", str(workers)]
    env = {tuning_toggles.ENV: ",".join(without), "PYTHONPATH": str(REPO)}
    if profile_dir is not None:
        env[request_profile.ENV] = str(profile_dir)
    service = processes._start("api", argv, env)
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60.0, service.log)
    return service


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def deployment_processes(
    stack: contextlib.ExitStack, deployment: str, root: Path, env: dict[str, str], label: str
) -> tuple[str, ProcessGroup]:
    """A migrated database of ``deployment`` (a fresh PostgreSQL database and a Redis namespace named
    ``label``, or a SQLite file in ``root``), ``env`` completed with its settings, and a process group
    on that environment, all released by ``stack``. Returns (bootstrap token, processes)."""
    if deployment == "production":
        database_url = stack.enter_context(fresh_postgres_database("collapipe_bench"))
        redis_url, prefix = stack.enter_context(redis_namespace(REDIS_DB, label))
        env |= {
            "COLLAPIPE_EXECUTOR": "celery",
            "COLLAPIPE_REDIS_URL": redis_url,
            "COLLAPIPE_REDIS_KEY_PREFIX": prefix,
        }
    else:
        database_url = f"sqlite:///{root / (label + '.db')}"
        env["COLLAPIPE_EXECUTOR"] = "local"
    env["COLLAPIPE_DATABASE_URL"] = database_url
    token = prepare_database(database_url)
    processes = ProcessGroup(env, root / "logs")
    stack.callback(processes.close)
    return token, processes


# -- 100 streams + listing ----------------------------------------------------------------------------


@contextlib.contextmanager
def stream_load_service(deployment: str, root: Path, without: list[str]) -> Iterator[tuple[str, str]]:
    """The service as ``collapipe serve`` starts it (and the e2e tests' ``running_server``): a
    migrated database with a bootstrap token, uvicorn with the access log, the local executor (2
    runs at once) or a Celery worker (``-c 2``). Yields (URL, token)."""
    env = {
        "COLLAPIPE_POLICIES": json.dumps(TEST_POLICIES),
        "COLLAPIPE_SSE_HEARTBEAT_S": "15",
        "COLLAPIPE_THREADS_PER_RUN": "1",
        "COLLAPIPE_MAX_PARALLEL_RUNS": "2",
        "COLLAPIPE_ARTIFACT_DIR": str(root / "runs"),
        "COLLAPIPE_DATA_DIR": str(root / "data"),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),  # the worker imports the paced test policy from tests/
    }
    with contextlib.ExitStack() as stack:
        token, processes = deployment_processes(stack, deployment, root, env, "bench-streams")
        if deployment == "production":
            processes.start_worker(concurrency=2)
        port = free_port()
        start_api(processes, port, 1, without, log_level="info")
        yield f"http://127.0.0.1:{port}", token


def bench_stream_load(deployment: str, root: Path, without: list[str]) -> dict[str, Any]:
    """100 streams on a running run + the listing at 50 req/s for 20 s (bench/service.py's docstring)."""
    directory = Path(tempfile.mkdtemp(prefix=f"stream-load-{deployment}-", dir=root))
    with stream_load_service(deployment, directory, without) as (url, token):
        headers = {"Authorization": f"Bearer {token}"}
        config = tiny_config(training={"rounds": 100}, scheduler={"policy": PACED_POLICY})
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            created = client.post("/api/runs", json={"config": config})
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            wait_until(lambda: client.get(f"/api/runs/{run_id}").json()["status"] == "running", 120.0)
        load_before = load_average()
        report = asyncio.run(stream_load(url, token, run_id, streams=100, rate=50, seconds=20))
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            run = client.get(f"/api/runs/{run_id}").json()
    # a run that failed (say, its policy missing on the worker) streams no rounds: say so
    outcome = {"status": run["status"], "rounds_done": run["rounds_done"], "error": run["error"]}
    return {**report.summary(), "run": outcome, "load_average": load_before}
