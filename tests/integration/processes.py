"""Service processes for integration tests and bench/service.py: API (uvicorn), Celery worker, reaper.

Each runs in its own session (process group), logs to a file, and is stopped with its whole group;
``ProcessGroup.close`` kills whatever is still alive, so a failing test leaves nothing behind. A
worker or reaper can run under a command ``prefix`` (``["ip", "netns", "exec", NAME]``: on another
host, tests/integration/netns.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (a prefork worker's parent and its children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the group, then SIGKILL if it is still there after ``timeout_s``."""
        if self.alive():
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=timeout_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class ProcessGroup:
    """Starts the service processes with one environment; ``close`` stops them all."""

    env: Mapping[str, str]
    log_dir: Path
    services: list[Service] = field(default_factory=list)

    def _start(
        self, name: str, argv: list[str], env: Mapping[str, str] | None = None, prefix: Sequence[str] = ()
    ) -> Service:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*prefix, *argv],
                cwd=REPO,
                env={**os.environ, **self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        service = Service(name, process, log_path)
        self.services.append(service)
        return service

    def start_worker(
        self,
        concurrency: int = 1,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
        loglevel: str = "warning",
    ) -> Service:
        node = f"test-{uuid.uuid4().hex[:6]}@%h"
        argv = [str(BIN / "celery"), "-A", "workers.celery_app", "worker", "-c", str(concurrency)]
        argv += ["-P", "prefork", f"--loglevel={loglevel}", "-n", node]
        argv += ["--without-gossip", "--without-mingle"]
        return self._start("worker", argv, env, prefix)

    def start_reaper(self, interval_s: float, prefix: Sequence[str] = ()) -> Service:
        argv = [sys.executable, "-m", "workers.reaper", "--interval", str(interval_s)]
        return self._start("reaper", argv, prefix=prefix)

    def start_api(self, port: int, timeout_s: float = 30.0) -> Service:
        argv = [str(BIN / "uvicorn"), "backend.app:create_app", "--factory", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "3"]
        service = self._start("api", argv)
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), timeout_s, lambda: service.log())
        return service

    def close(self) -> None:
        for service in reversed(self.services):
            service.terminate(timeout_s=5.0)
        self.services.clear()

    def logs(self) -> str:
        return "\n".join(f"===== {s.name} (pid {s.pid}) =====\n{s.log()}" for s in self.services)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    explain: Callable[[], str] = lambda: "",
    poll_s: float = 0.05,
) -> None:
    """Poll ``predicate`` until true; AssertionError with ``explain()`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s\n{explain()}")
        time.sleep(poll_s)
