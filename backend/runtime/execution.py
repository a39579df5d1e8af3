"""``execute_run``: the one function that executes a run — called by the local executor's child
processes and by the Celery task. Idempotent and safe against concurrent duplicates:

1. Claim (``lifecycle.claim``): queued, or running with an expired lease → running under a lease
   whose token is ``claimant``. Someone else holds a live lease → ``"skipped"`` at once. A run of a
   study that already runs its ``concurrency`` runs → ``"deferred"`` at once (it stays queued; the
   executor hands it over again when a slot frees).
2. Resume from the checkpoint the run's row names (``checkpoints.RunCheckpoints``: one file per
   attempt and round, named in the row by its lease holder once complete, so a claimant that lost its
   lease can neither replace nor tear it). The database's rounds are the truth: a checkpoint behind
   ``rounds_done`` re-runs rounds the database ignores (a round already stored is not stored nor
   published twice); one ahead of it, missing or unreadable is not used and the run replays from
   round 0 — deterministic.
3. Run the core Runner segment by segment (forks, see segments.py); each round is
   ``lifecycle.record_round``: one fenced transaction with its live event; each checkpoint is named
   by ``lifecycle.record_checkpoint``. A heartbeat thread renews the lease every lease/3 so a long
   round keeps it. ``should_stop`` checks ``cancel_requested`` between rounds. While the database is
   unavailable these writes are retried (``outage.through_outage``): the run waits and goes on.
4. Finish (fenced): succeeded, cancelled, or failed with the error text. ``LeaseLost`` (taken over)
   returns ``"lease_lost"`` without touching the row.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from backend.runtime import lifecycle
from backend.runtime.checkpoints import CheckpointNotWritable, RunCheckpoints
from backend.runtime.lifecycle import ClaimedRun, Deferred, Lease, LeaseLost, RunStore
from backend.runtime.outage import is_unavailable, through_outage
from backend.runtime.segments import plan_segments
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.validation import ConfigError, parse_config
from collapipe_core.workspace import Workspace

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "failed", "cancelled", "skipped", "deferred", "lease_lost"]


def checkpoint_dir_for(artifact_dir: Path, run_id: int) -> Path:
    return Path(artifact_dir) / f"run-{run_id}"


def execute_run(
    run_id: int,
    store: RunStore,
    *,
    claimant: str,
    artifact_dir: Path,
    workspace: Workspace,
    lease_s: float = 60.0,
) -> Outcome:
    """Claim run ``run_id`` and run it to the end (or cancel/failure); returns what happened.

    ``claimant`` must be unique per call (it is the lease's fencing token). The run's configs are
    checked again in this process's ``workspace``: a worker without a policy or a file the config
    names fails the run with a message naming it."""
    claimed = lifecycle.claim(store, run_id, claimant, lease_s)
    if claimed is None:
        return "skipped"
    if isinstance(claimed, Deferred):
        return "deferred"
    lease, run = claimed
    keeper = _LeaseKeeper(store, lease)
    keeper.start()

    def should_stop() -> bool:
        return keeper.lost.is_set() or _cancel_requested(store, run_id)

    status: Outcome
    error: str | None = None
    try:
        if run.cancel_requested:
            status = "cancelled"
        else:
            directory = checkpoint_dir_for(artifact_dir, run_id)
            checkpoints = RunCheckpoints(directory, Path(artifact_dir), store, lease, run)
            finished = _run_segments(run, _RoundRecorder(store, lease), checkpoints, should_stop, workspace)
            if keeper.lost.is_set():
                raise LeaseLost(f"run {run_id}: lease of {claimant!r} was taken over")
            status = "succeeded" if finished else "cancelled"
    except LeaseLost:
        log.warning("run %s: lease lost by %s; stopping without further writes", run_id, claimant)
        return "lease_lost"
    except ConfigError as err:
        status = "failed"
        problems = "; ".join(str(p) for p in err.problems)
        error = f"the worker on {socket.gethostname()} cannot run this config: {problems}"
        log.error("run %s: %s", run_id, error)
    except CheckpointNotWritable as err:
        status, error = "failed", str(err)
        log.error("run %s: %s", run_id, error)
    except Exception as err:
        log.exception("run %s failed", run_id)
        status, error = "failed", f"{type(err).__name__}: {err}"
    finally:
        keeper.stop()
    finished = through_outage(
        lambda: lifecycle.finish(store, lease, status, error), f"run {run_id}: recording its end ({status})"
    )
    return status if finished else "lease_lost"


def _cancel_requested(store: RunStore, run_id: int) -> bool:
    """Whether the run was asked to stop; False while the database is unavailable (asked again after
    the next round)."""
    try:
        return lifecycle.is_cancel_requested(store, run_id)
    except Exception as err:
        if is_unavailable(err):
            return False
        raise


class _RoundRecorder:
    """The core's RecordSink: each round is ``lifecycle.record_round`` under the run's lease."""

    def __init__(self, store: RunStore, lease: Lease) -> None:
        self.store = store
        self.lease = lease

    def write_round(self, result: RoundResult) -> None:
        what = f"run {self.lease.run_id}: storing round {result.round.round}"
        through_outage(lambda: lifecycle.record_round(self.store, self.lease, result), what)

    def close(self) -> None:
        pass


def _run_segments(
    claimed: ClaimedRun,
    sink: _RoundRecorder,
    checkpoints: RunCheckpoints,
    should_stop: Callable[[], bool],
    workspace: Workspace,
) -> bool:
    """Run every segment from the checkpoint on; True when all rounds are done, False when stopped."""
    segments = plan_segments(
        claimed.config, claimed.replay_configs, claimed.total_rounds, lambda c: parse_config(c, workspace)
    )
    for segment in segments:
        if checkpoints.next_round() >= segment.end_round:
            continue
        runner = Runner(
            segment.config, sink, workspace=workspace, checkpoints=checkpoints.for_segment(segment)
        )
        start = runner.resume()
        runner.run(max_rounds=segment.end_round - start, should_stop=should_stop)
        if runner.next_round < segment.end_round:
            return False
        if should_stop() and segment.end_round < claimed.total_rounds:
            return False
    return True


class _LeaseKeeper:
    """Renews the lease every lease/3 seconds in a thread, so a round longer than the lease keeps it."""

    def __init__(self, store: RunStore, lease: Lease) -> None:
        self.store = store
        self.lease = lease
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-run-{lease.run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.lease.lease_s / 3):
            try:
                owned = lifecycle.renew(self.store, self.lease)
            except Exception:  # a DB hiccup: try again next period; the lease has slack
                log.exception("run %s: lease renewal failed", self.lease.run_id)
                continue
            if not owned:
                self.lost.set()
                return
