"""The real service for the browser tests, in either deployment, started as an operator would.

- ``embedded``: ``collapipe serve`` in a subprocess on a SQLite file, the local executor (one
  spawned process per run), live updates tailed from the database.
- ``production``: ``collapipe serve --executor celery`` on a fresh migrated PostgreSQL database,
  Redis as broker and live wake-ups (under a key prefix of this session), and a real
  Celery worker process (``-c 2``, as many runs at once as the embedded default).

Both get a bootstrap admin token for set-up through the API, users of every role with known
passwords, and a data directory of their own (``Server.data_dir``, COLLAPIPE_DATA_DIR; the worker
reads the same one).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.deployment_params import DEPLOYMENTS
from tests.integration.processes import ProcessGroup
from tests.workers.services import fresh_postgres_database, redis_namespace

REPO = Path(__file__).resolve().parents[2]
REDIS_DB = 11  # the API suite uses 12 and the integration tests 13; key prefixes keep sessions apart
PASSWORDS = {"viewer": "viewer-password-1", "operator": "operator-password-1", "admin": "admin-password-1"}
USERNAMES = {"viewer": "vera", "operator": "otto", "admin": "ada"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path
    database_url: str
    data_dir: Path
    deployment: str = "embedded"
    workers: ProcessGroup | None = None  # production: the Celery worker

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def log(self) -> str:
        """The server's log, and for production the worker's after it."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text + ("\n" + self.workers.logs() if self.workers is not None else "")

    def wait_for_run(self, run_id: int, statuses: tuple[str, ...], timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while True:
                run: dict[str, Any] = client.get(f"/api/runs/{run_id}").raise_for_status().json()
                if run["status"] in statuses:
                    return run
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"run {run_id} is {run['status']}, not {statuses}\n{self.log()[-3000:]}"
                    )
                time.sleep(0.1)

    def launch(self, config: dict[str, Any], name: str | None = None) -> int:
        body: dict[str, Any] = {"config": config, **({"name": name} if name else {})}
        with self.client() as client:
            response = client.post("/api/runs", json=body)
            assert response.status_code == 201, response.text
            run_id: int = response.json()["id"]
            return run_id


@contextlib.contextmanager
def running_server(
    root: Path, deployment: str = "embedded", extra_env: dict[str, str] | None = None
) -> Iterator[Server]:
    """Start the service of ``deployment`` on a free loopback port; stop every process afterwards."""
    if deployment == "embedded":
        with _serve(root, f"sqlite:///{root / 'e2e.db'}", "local", extra_env or {}) as server:
            yield server
        return
    if deployment != "production":
        raise ValueError(f"deployment {deployment!r}: choose one of {DEPLOYMENTS}")
    with (
        fresh_postgres_database("collapipe_e2e") as database_url,
        redis_namespace(REDIS_DB, "e2e") as (redis_url, prefix),
    ):
        env = {
            "COLLAPIPE_DATABASE_URL": database_url,
            "COLLAPIPE_EXECUTOR": "celery",
            "COLLAPIPE_REDIS_URL": redis_url,
            "COLLAPIPE_REDIS_KEY_PREFIX": prefix,
            "COLLAPIPE_ARTIFACT_DIR": str(root / "runs"),
            "COLLAPIPE_DATA_DIR": str(root / "data"),
            "COLLAPIPE_THREADS_PER_RUN": "1",
            "OMP_NUM_THREADS": "1",
            **(extra_env or {}),
        }
        workers = ProcessGroup(env, root / "worker-logs")
        try:
            workers.start_worker(concurrency=2)
            with _serve(root, database_url, "celery", env) as server:
                server.deployment, server.workers = "production", workers
                yield server
        finally:
            workers.close()


@contextlib.contextmanager
def _serve(root: Path, database_url: str, executor: str, extra_env: dict[str, str]) -> Iterator[Server]:
    """``collapipe serve`` with ``executor`` on ``database_url``; its process group stopped after."""
    port = free_port()
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "COLLAPIPE_BOOTSTRAP_TOKEN": token,
        "COLLAPIPE_THREADS_PER_RUN": "1",
        "COLLAPIPE_MAX_PARALLEL_RUNS": "2",
        "COLLAPIPE_SSE_HEARTBEAT_S": "2",
        "COLLAPIPE_DATA_DIR": str(root / "data"),  # not ./data of the repository
        "OMP_NUM_THREADS": "1",
        **extra_env,
    }
    argv = [
        str(Path(sys.executable).parent / "collapipe"), "serve", "--port", str(port),
        "--database-url", database_url, "--executor", executor, "--artifact-dir", str(root / "runs"),
    ]  # fmt: skip
    log_path = root / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    data_dir = Path(env["COLLAPIPE_DATA_DIR"])
    server = Server(f"http://127.0.0.1:{port}", token, process, log_path, database_url, data_dir)
    try:
        _wait_healthy(server)
        create_users(server)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _wait_healthy(server: Server, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"collapipe serve exited with {server.process.returncode}\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"collapipe serve did not answer within {timeout_s} s\n{server.log()}")
        time.sleep(0.1)


def create_users(server: Server) -> None:
    """A user of each role, created by the admin as an operator would; each then chooses their own
    password (PASSWORDS), as the service requires before anything else."""
    with server.client() as client:
        for role, username in USERNAMES.items():
            initial = f"initial {PASSWORDS[role]}"
            body = {"username": username, "password": initial, "role": role}
            client.post("/api/users", json=body).raise_for_status()
            choose_password(server, username, initial, PASSWORDS[role])


def choose_password(server: Server, username: str, current: str, new: str) -> None:
    """Sign in as ``username`` and replace the password an admin set with ``new``."""
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        browser.post("/api/auth/login", json={"username": username, "password": current}).raise_for_status()
        body = {"current_password": current, "new_password": new}
        browser.post("/api/auth/password", json=body, headers={"X-CollaPipe": "1"}).raise_for_status()
