"""A new user's first "Check & pre-flight" on a fresh server (a benchmark, not a test); prints one JSON
object.

Starts ``collapipe serve`` (embedded: SQLite, local executor, an empty data directory, the default
deadlines) from ``--tree`` (cwd and PYTHONPATH there: another revision's worktree measures that
revision), and as soon as /healthz answers presses the launch form's first button as the browser does:
``POST /api/config/validate`` then ``POST /api/config/preflight`` of the quickstart preset, then both
again. Per repeat: seconds from starting the server to /healthz (``healthy_s``), to the first
validate's answer and to the first pre-flight's answer (``first_preflight_s``, the figure a user
waits for), the HTTP status of each, the second button press's seconds, and the load average when the
server started (the machine is shared: the figures are for that load).

    .venv/bin/python bench/first_preflight.py [--repeat 3] [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _press(client: httpx.Client, config: dict[str, Any]) -> dict[str, Any]:
    """The button: validate, then pre-flight; each answer's status and seconds."""
    started = time.monotonic()
    checked = client.post("/api/config/validate", json=config)
    validated = time.monotonic()
    estimated = client.post("/api/config/preflight", json=config)
    done = time.monotonic()
    return {
        "validate_status": checked.status_code,
        "validate_s": round(validated - started, 2),
        "preflight_status": estimated.status_code,
        "preflight_s": round(done - validated, 2),
        "preflight_answer": estimated.text[:300] if estimated.status_code != 200 else "round 0",
        "button_s": round(done - started, 2),
    }


def measure_once(tree: Path, config: dict[str, Any]) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="first-preflight-") as root:
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "COLLAPIPE_BOOTSTRAP_TOKEN": token,
            "COLLAPIPE_DATA_DIR": str(Path(root) / "data"),
        }
        argv = [
            str(Path(sys.executable).parent / "collapipe"), "serve", "--port", str(port),
            "--database-url", f"sqlite:///{root}/bench.db", "--executor", "local",
            "--artifact-dir", str(Path(root) / "runs"),
        ]  # fmt: skip
        load = os.getloadavg()[0]
        started = time.monotonic()
        with (Path(root) / "server.log").open("wb") as log:
            server = subprocess.Popen(
                argv, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                if server.poll() is not None:
                    raise RuntimeError((Path(root) / "server.log").read_text(errors="replace"))
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            healthy = time.monotonic() - started
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
                first = _press(client, config)
                answered = time.monotonic() - started
                second = _press(client, config)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
    return {
        "load_average_1m": round(load, 1),
        "healthy_s": round(healthy, 2),
        "first_preflight_s": round(answered, 2),
        "first": first,
        "second": second,
    }


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=REPO, help="the source tree the server runs from")
    args = parser.parse_args()
    config = json.loads((REPO / "frontend" / "presets" / "quickstart.json").read_text(encoding="utf-8"))
    runs = [measure_once(args.tree.resolve(), config) for _ in range(args.repeat)]
    print(json.dumps({"tree": str(args.tree), "cores": os.cpu_count(), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
