"""The pre-flight estimate, computed in a process of its own with a deadline.

A pre-flight runs round 0 of the config's policy on the cost model. Its cost grows with the config
(DSSDA over 100 clusters × 100 devices takes over a minute on 2 cores), and any viewer may ask for
one, so it never runs in the API's threads: one child process per API process (spawned on first
use) computes them one at a time. A request waits for its turn without holding a thread; a
pre-flight still running after ``timeout_s`` is stopped — the child is killed and the next request
starts a new one — and answered with a 422 that says how to get the figures another way.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from anyio import to_thread

from backend.errors import InvalidInput, Unavailable
from backend.jsonsafe import sanitize
from collapipe_core.workspace import Workspace


def _serve(connection: Connection) -> None:
    """The child: once its imports are done, say so; then answer (config, workspace) requests with
    round 0's records, forever."""
    from collapipe_core.runner import Runner
    from collapipe_core.sinks import MemorySink
    from collapipe_core.validation import parse_config

    connection.send(("ready", None))
    while True:
        try:
            data, workspace = connection.recv()
        except EOFError:
            return
        try:
            config = parse_config(data, workspace)
            analytic = config.model_copy(
                update={"executor": "analytic", "training": config.training.model_copy(update={"rounds": 1})}
            )
            sink = MemorySink()
            Runner(analytic, sink, workspace=workspace).run()
            connection.send(("ok", sanitize(sink.results[0].to_json())))
        except Exception as err:  # the config was validated by the API; report anything else
            connection.send(("error", f"{type(err).__name__}: {err}"[:500]))


class PreflightProcess:
    STARTUP_TIMEOUT_S = 120.0  # a new child imports torch and the core before the deadline starts

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._turn = asyncio.Lock()

    async def run(self, config: dict[str, Any], workspace: Workspace) -> dict[str, Any]:
        """Round 0 of ``config`` (already validated) as ``{"round": ..., "devices": [...]}``."""
        async with self._turn:
            connection = await to_thread.run_sync(self._ready)
            try:
                connection.send((config, workspace))
                answered = await to_thread.run_sync(connection.poll, self.timeout_s)
                reply: tuple[str, Any] = connection.recv() if answered else ("late", None)
                status, payload = reply
            except BaseException:  # cancelled (the client left) or the child died: start afresh
                self.stop()
                raise
            if status == "late":
                await to_thread.run_sync(self.stop)
                raise InvalidInput(
                    f"the pre-flight estimate of this config takes longer than {self.timeout_s:g} s on the "
                    "server; launch the run, or compute round 0 locally with `collapipe schedule CONFIG "
                    "--rounds 1 --json`",
                    [{"field": "config", "value": None, "message": "too large for the server's pre-flight"}],
                )
        if status != "ok":
            raise InvalidInput(
                f"the pre-flight failed: {payload}", [{"field": "config", "value": None, "message": payload}]
            )
        result: dict[str, Any] = payload
        return result

    def _ready(self) -> Connection:
        if self._process is None or not self._process.is_alive() or self._connection is None:
            self.stop()
            parent, child = self._context.Pipe()
            process = self._context.Process(
                target=_serve, args=(child,), name="collapipe-preflight", daemon=True
            )
            process.start()
            child.close()
            self._process, self._connection = process, parent
            if not parent.poll(self.STARTUP_TIMEOUT_S) or parent.recv()[0] != "ready":
                self.stop()
                raise Unavailable("the pre-flight process did not start; try again, or see the server log")
        return self._connection

    def stop(self) -> None:
        """Kill the child (a pre-flight past its deadline, or the app's shutdown)."""
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=10)
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None
