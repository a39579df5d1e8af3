"""``execute_run``: the one function that executes a run — called by the local runner's child
processes and by the Celery task. Idempotent and safe against concurrent duplicates:

1. Claim with a conditional UPDATE (queued, or running with an expired lease → running, our lease,
   attempt + 1). Someone else holds a live lease → return ``"skipped"`` at once.
2. Reconcile: the DB's rounds are the truth. A checkpoint ahead of ``rounds_done`` (rounds lost
   from the DB) is discarded and the run replays from round 0 — deterministic, and insert-or-ignore
   absorbs rounds already stored. A checkpoint behind re-runs rounds the DB ignores.
3. Run the core Runner segment by segment (forks, see segments.py) with ``SqlRoundSink``: each round
   is one fenced transaction, then a live event. Rounds an earlier attempt stored without publishing
   are published first (``SqlRoundSink.catch_up``), and again before the final status. A heartbeat
   thread renews the lease every lease/3 so a long round keeps it. ``should_stop`` checks
   ``cancel_requested`` between rounds.
4. Finish (fenced): succeeded, cancelled, or failed with the error text; publish the status.
   ``LeaseLost`` (taken over) returns ``"lease_lost"`` without touching the row.
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from backend.db.base import utcnow
from backend.db.engine import SessionFactory
from backend.live.channel import STATUS, LiveChannel, status_payload
from backend.runs import lease_repository as leases
from backend.runs.segments import checkpoint_round, plan_segments, relabel_checkpoint
from backend.runs.sink import LeaseLost, SqlRoundSink
from collapipe_core.runner import Runner
from collapipe_core.validation import ConfigError, parse_config
from collapipe_core.workspace import Workspace

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "failed", "cancelled", "skipped", "lease_lost"]


def checkpoint_dir_for(artifact_dir: Path, run_id: int) -> Path:
    return Path(artifact_dir) / f"run-{run_id}"


def execute_run(
    run_id: int,
    session_factory: SessionFactory,
    channel: LiveChannel,
    *,
    claimant: str,
    artifact_dir: Path,
    workspace: Workspace,
    lease_s: float = 60.0,
) -> Outcome:
    """Claim run ``run_id`` and run it to the end (or cancel/failure); returns what happened.

    The run's configs are checked again in this process's ``workspace``: a worker without a policy or
    a file the config names fails the run with a message naming it."""
    with session_factory() as session:
        claimed = leases.claim_run(session, run_id, claimant, utcnow(), lease_s)
        session.commit()
    if claimed is None:
        return "skipped"
    _publish_status(channel, run_id, "running", claimed.rounds_done, claimed.total_rounds, None)
    keeper = _LeaseKeeper(session_factory, run_id, claimant, lease_s)
    keeper.start()

    def should_stop() -> bool:
        if keeper.lost.is_set():
            return True
        with session_factory() as session:
            return leases.is_cancel_requested(session, run_id)

    status: Outcome
    error: str | None = None
    sink = SqlRoundSink(session_factory, run_id, claimant, channel, lease_s)
    _catch_up(sink)  # rounds an earlier attempt stored but did not publish (it crashed in between)
    try:
        if claimed.cancel_requested:
            status = "cancelled"
        else:
            directory = checkpoint_dir_for(artifact_dir, run_id)
            _reconcile_checkpoint(directory, claimed.rounds_done)
            finished = _run_segments(claimed, sink, directory, should_stop, workspace)
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
    except Exception as err:
        log.exception("run %s failed", run_id)
        status, error = "failed", f"{type(err).__name__}: {err}"
    finally:
        keeper.stop()
    with session_factory() as session:
        owned = leases.finish_run(session, run_id, claimant, status, error, utcnow())
        session.commit()
        rounds_done = leases.rounds_done(session, run_id)
    if not owned:
        return "lease_lost"
    _catch_up(sink)  # every stored round is on the stream before the final status
    _publish_status(channel, run_id, status, rounds_done, claimed.total_rounds, error)
    return status


def _run_segments(
    claimed: leases.ClaimedRun,
    sink: SqlRoundSink,
    directory: Path,
    should_stop: Callable[[], bool],
    workspace: Workspace,
) -> bool:
    """Run every segment from the checkpoint on; True when all rounds are done, False when stopped."""
    segments = plan_segments(
        claimed.config, claimed.replay_configs, claimed.total_rounds, lambda c: parse_config(c, workspace)
    )
    for segment in segments:
        if checkpoint_round(directory) >= segment.end_round:
            continue
        relabel_checkpoint(directory, segment)
        runner = Runner(segment.config, sink, checkpoint_dir=directory, workspace=workspace)
        start = runner.resume()
        runner.run(max_rounds=segment.end_round - start, should_stop=should_stop)
        if runner.next_round < segment.end_round:
            return False
        if should_stop() and segment.end_round < claimed.total_rounds:
            return False
    return True


def _reconcile_checkpoint(directory: Path, rounds_in_db: int) -> None:
    ahead = checkpoint_round(directory)
    if ahead > rounds_in_db:
        log.warning(
            "%s: checkpoint at round %d is ahead of the database (%d rounds); replaying from round 0",
            directory,
            ahead,
            rounds_in_db,
        )
        shutil.rmtree(directory)


def _catch_up(sink: SqlRoundSink) -> None:
    """Publish stored rounds missing from the live stream; a failure is logged and retried later."""
    try:
        sink.catch_up()
    except Exception:
        sink.mark_behind()
        log.exception("run %s: could not publish stored rounds to the live stream", sink.run_id)


def _publish_status(
    channel: LiveChannel, run_id: int, status: str, rounds_done: int, total: int, error: str | None
) -> None:
    channel.publish(run_id, STATUS, status_payload(run_id, status, rounds_done, total, error))


class _LeaseKeeper:
    """Renews the lease every lease/3 seconds in a thread, so a round longer than the lease keeps it."""

    def __init__(self, session_factory: SessionFactory, run_id: int, claimant: str, lease_s: float) -> None:
        self.session_factory = session_factory
        self.run_id = run_id
        self.claimant = claimant
        self.lease_s = lease_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-run-{run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                with self.session_factory() as session:
                    owned = leases.renew_lease(session, self.run_id, self.claimant, utcnow(), self.lease_s)
                    session.commit()
            except Exception:  # a DB hiccup: try again next period; the lease has slack
                log.exception("run %s: lease renewal failed", self.run_id)
                continue
            if not owned:
                self.lost.set()
                return
