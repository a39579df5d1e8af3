"""Celery tasks: thin adapters from ids to ``backend.runtime.execution`` and ``workers.reaper``.

``run_experiment`` is idempotent: ``execute_run`` claims the run row with a lease, so a duplicate or
redelivered message either resumes a run whose lease expired (from its last committed round) or
returns ``"skipped"`` at once. It never reads or writes the Celery result backend. After a study's
run ends (or is deferred: its study already runs ``concurrency`` runs), the task sends the study's
runs that may start now (``CeleryRunExecutor.start_deferred``).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

import redis
import torch
from celery import Task, signals

from backend.runtime.celery_app import REAP_TASK, RUN_TASK
from backend.runtime.execution import execute_run
from workers.celery_app import app
from workers.context import WorkerContext, close_worker_context, get_worker_settings, worker_context

log = logging.getLogger(__name__)


def claimant_name(task_id: str) -> str:
    """Who holds a run's lease: ``host:pid:task id:random`` — readable in the runs table, and unique
    per execution (a redelivered message keeps its task id): it is the lease's fencing token."""
    return f"{socket.gethostname()}:{os.getpid()}:{task_id}:{uuid.uuid4().hex[:8]}"


@app.task(bind=True, name=RUN_TASK)  # type: ignore[untyped-decorator]
def run_experiment(self: Task, run_id: int) -> str:
    """Run (or resume, or skip) run ``run_id``; returns the outcome of ``execute_run``."""
    task_id = str(self.request.id)
    ctx = worker_context()
    # small models on many threads per process are slower than on one (measured 30x on 2 cores)
    torch.set_num_threads(ctx.settings.torch_threads())
    try:
        outcome = execute_run(
            run_id,
            ctx.store,
            claimant=claimant_name(task_id),
            artifact_dir=ctx.settings.artifact_dir,
            workspace=ctx.workspace,
            lease_s=ctx.settings.lease_s,
        )
    finally:
        # this message is done with (a run still queued now has lost its message: the reaper resends)
        _clear_mark(ctx, run_id, task_id)
    try:
        started = ctx.dispatcher.start_deferred(run_id, outcome)
    except Exception as err:  # the broker or the database is down: the reaper resends runs that may start
        log.warning(
            "run %s (%s): its study's deferred runs not handed over (%s); the reaper sends them",
            run_id,
            outcome,
            err,
        )
    else:
        if started:
            log.info("run %s (%s): sent its study's deferred runs %s", run_id, outcome, started)
    redelivered = (self.request.delivery_info or {}).get("redelivered")
    log.info("run %s (task %s, redelivered=%s): %s", run_id, task_id, redelivered, outcome)
    return outcome


def _clear_mark(ctx: WorkerContext, run_id: int, task_id: str) -> None:
    """Clear the message's dispatch mark. Redis being unreachable does not fail the task: the run's
    outcome is in the database whatever Redis does, and the mark expires by itself."""
    try:
        ctx.ledger.clear(run_id, task_id)
    except redis.RedisError as err:
        log.warning(
            "run %s: dispatch mark of task %s not cleared, Redis is unreachable (%s); it expires within "
            "%.0f h (the run's status is in the database)",
            run_id,
            task_id,
            err,
            ctx.ledger.ttl_s / 3600,
        )


@app.task(name=REAP_TASK)  # type: ignore[untyped-decorator]
def reap_stale_runs() -> dict[str, list[int]]:
    """One reaper sweep (for ``celery beat``; ``python -m workers.reaper`` is the standalone loop)."""
    from workers.reaper import reaper_for_worker

    report = reaper_for_worker().sweep()
    return {"requeued": report.requeued, "resent": report.resent}


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _lower_priority(**_: Any) -> None:
    """Runs execute at ``run_nice`` (set before the process starts any thread: threads inherit it)."""
    os.nice(get_worker_settings().run_nice)


@signals.worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _close_process(**_: Any) -> None:
    close_worker_context()
