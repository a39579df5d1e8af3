"""The embedded executor: the runs table is the queue, one spawned process per run.

``LocalDispatcher`` is an asyncio task in the API process (started by the app's lifespan when
``executor = "local"``). Each tick (or at once after ``enqueue``) it:

1. reaps finished children: a child that died without finishing its run (killed, out of memory)
   leaves the row running under its lease — the run is marked failed, naming the exit code, so the
   user sees it and can resume it from its last checkpoint;
2. re-queues running rows whose lease expired (a previous API process died with runs in flight);
3. starts a process per queued run that may start (``lifecycle.startable_run_ids``: a study's runs
   only while it has a free slot), up to ``max_parallel_runs``, running ``execute_run`` (its live
   events go to the outbox table, which the API's readers poll). A study's run that a child has not
   claimed yet holds its place in the study's queue, so no child is started for a run its study
   would defer.

Run processes come from a ``forkserver`` that imported torch and the runner once (``PRELOAD``,
started when the dispatcher starts), so a run starts in tens of milliseconds instead of paying the
seconds of a fresh interpreter's imports; a study of many short runs is otherwise dominated by them.
The forkserver is a fresh interpreter, not a fork of the API process, so no API state or thread is
inherited. Its environment is the one it started with: each child takes the API process's current
``COLLAPIPE_*`` variables (``run_child``'s ``environment``).

On shutdown children are terminated and their runs re-queued (they continue from the checkpoint on
the next start). DB calls run in worker threads so the event loop never blocks on SQLite locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import socket
import uuid
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

from anyio import to_thread

from backend.runtime import lifecycle
from backend.runtime.lifecycle import Lease, RunStore
from backend.runtime.outage import is_unavailable
from backend.settings import Settings
from collapipe_core.workspace import Workspace

log = logging.getLogger(__name__)

# imported once by the forkserver; every run process starts with them loaded. Beyond the runner's own
# imports: what a run imports on first use (the cost model's meta-device measurement pulls in torch's
# decompositions and dynamo, with sympy; the data loaders, tokenizers and Parquet; the scheduler) — together
# ~2 s of each run's start without them, measured on the tiny config
PRELOAD = [
    "torch",
    "torch._decomp",
    "torch._dynamo",
    "pyarrow.parquet",
    "tokenizers",
    "collapipe_core.runner",
    "collapipe_core.costmodel.measure",
    "collapipe_core.models",
    "collapipe_core.data",
    "collapipe_core.scheduler.dssda",
    "backend.db.engine",
    "backend.runtime.execution",
]
ENV_PREFIX = "COLLAPIPE_"


@dataclass
class _Child:
    process: BaseProcess
    claimant: str


def run_child(
    run_id: int,
    database_url: str,
    artifact_dir: str,
    claimant: str,
    lease_s: float,
    threads: int,
    nice: int,
    workspace: Workspace,
    environment: dict[str, str],
) -> None:
    """Entry point of a run's process. ``environment``: the API process's ``COLLAPIPE_*`` variables
    when the run started (they replace the forkserver's). ``nice`` is added to the process's
    niceness before any thread starts (threads inherit it)."""
    os.nice(nice)
    import torch

    from backend.db.engine import EXECUTOR_LIMITS, make_engine, make_session_factory
    from backend.runtime.execution import execute_run

    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        del os.environ[name]
    os.environ.update(environment)
    torch.set_num_threads(threads)
    engine = make_engine(database_url, EXECUTOR_LIMITS)
    try:
        execute_run(
            run_id,
            RunStore(make_session_factory(engine)),
            claimant=claimant,
            artifact_dir=Path(artifact_dir),
            workspace=workspace,
            lease_s=lease_s,
        )
    finally:
        engine.dispose()


class LocalDispatcher:
    def __init__(self, settings: Settings, store: RunStore) -> None:
        self.settings = settings
        self.store = store
        self.children: dict[int, _Child] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        cores = os.cpu_count() or 1
        self.threads_per_run = settings.threads_per_run or max(1, cores // settings.max_parallel_runs)

    async def start(self) -> None:
        await to_thread.run_sync(multiprocessing.forkserver.ensure_running)
        await to_thread.run_sync(self.recover)
        self._task = asyncio.create_task(self._loop(), name="collapipe-local-dispatcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await to_thread.run_sync(self._terminate_children)

    def enqueue(self, run_id: int) -> None:
        self._wake.set()

    def check_ready(self) -> str | None:
        if self._task is None or self._task.done():
            return "the local run dispatcher is not running"
        return None

    def queue_depth(self) -> int | None:
        return None

    def recover(self) -> list[int]:
        """Re-queue running rows whose lease expired; returns their ids."""
        requeued = [row.run_id for row in lifecycle.requeue_stale(self.store)]
        for run_id in requeued:
            log.warning("run %s: lease expired (its process is gone); re-queued", run_id)
        return requeued

    async def _loop(self) -> None:
        unavailable = False  # the database was unavailable at the last tick (logged once)
        while True:
            try:
                await to_thread.run_sync(self.tick)
            except Exception as err:  # keep dispatching; the next tick retries
                if not is_unavailable(err):
                    log.exception("local dispatcher tick failed")
                elif not unavailable:
                    log.warning("local dispatcher: the database is unavailable (%s); retrying", err)
                unavailable = is_unavailable(err)
            else:
                if unavailable:
                    log.warning("local dispatcher: the database answers again")
                unavailable = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.dispatch_interval_s)
            self._wake.clear()

    def tick(self) -> None:
        self._reap()
        self.recover()
        free = self.settings.max_parallel_runs - len(self.children)
        if free <= 0:
            return
        queued = lifecycle.startable_run_ids(self.store, free + len(self.children))
        for run_id in [r for r in queued if r not in self.children][:free]:
            self._spawn(run_id)

    def _spawn(self, run_id: int) -> None:
        claimant = f"local:{socket.gethostname()}:{os.getpid()}:run-{run_id}:{uuid.uuid4().hex[:8]}"
        s = self.settings
        process = self._context.Process(
            target=run_child,
            args=(
                run_id,
                s.database_url,
                str(s.artifact_dir),
                claimant,
                s.lease_s,
                self.threads_per_run,
                s.run_nice,
                s.workspace(),
                {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)},
            ),
            name=f"collapipe-run-{run_id}",
        )
        process.start()
        self.children[run_id] = _Child(process, claimant)

    def _reap(self) -> None:
        for run_id, child in list(self.children.items()):
            if child.process.is_alive():
                continue
            child.process.join()
            del self.children[run_id]
            code = child.process.exitcode
            if code != 0:
                self._fail_orphan(run_id, child.claimant, code)

    def _fail_orphan(self, run_id: int, claimant: str, exit_code: int | None) -> None:
        error = (
            f"the run's process exited with code {exit_code} before finishing; "
            "resume the run to continue from its last checkpoint"
        )
        if lifecycle.fail_orphan(self.store, run_id, claimant, error):
            log.error("run %s: %s", run_id, error)

    def _terminate_children(self) -> None:
        for run_id, child in list(self.children.items()):
            child.process.terminate()
            child.process.join(timeout=10)
            if child.process.is_alive():
                child.process.kill()
                child.process.join()
            lifecycle.release(self.store, Lease(run_id, child.claimant, self.settings.lease_s))
        self.children.clear()
