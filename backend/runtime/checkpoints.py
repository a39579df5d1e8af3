"""A run's checkpoints in the service: a file per attempt and round, the run's row names the current one.

Each claim of a run is an attempt (``runs.attempt``); attempt A writes the checkpoint that continues
at round R as ``checkpoint-a<A>-r<R>.pt`` in the run's artifact directory (``run-<id>/``), whole or
not at all (``collapipe_core.checkpoint.write_checkpoint``), and only then names it in the run's row
(``lifecycle.record_checkpoint``, fenced by the attempt's lease). Readers load the file the row
names, never "the newest file", so:

- a claimant that lost its lease (frozen past it, then thawed) writes only files of its own attempt,
  which the row never names: it cannot replace what the current owner wrote;
- a file being written, or torn by a crash, is never named: it is never read as the latest.

After naming a file the owner deletes the files of earlier attempts and its own earlier rounds
(never a later attempt's: a claimant that lost its lease deletes nothing the owner needs). A named
file that is missing or unreadable (the artifact directory lost or damaged), or ahead of the rounds
the database holds, is not resumed from: the run replays from round 0, which reproduces every round
exactly and stores none twice.
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

from backend.runtime import lifecycle
from backend.runtime.lifecycle import ClaimedRun, Lease, LeaseLost, RunStore
from backend.runtime.outage import through_outage
from backend.runtime.segments import Segment, relabelled
from collapipe_core.checkpoint import TEMPORARY_SUFFIX, read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

LEGACY_NAME = "checkpoint.pt"  # the one file runs wrote before per-attempt names: attempt 0
_NAME = re.compile(r"^checkpoint-a(\d{1,9})-r(\d{1,9})\.pt$")


class CheckpointNotWritable(RuntimeError):
    """The worker cannot write the run's checkpoint: the run fails with what to do."""


def checkpoint_name(attempt: int, next_round: int) -> str:
    return f"checkpoint-a{attempt}-r{next_round}.pt"


def _attempt_and_round(name: str) -> tuple[int, int] | None:
    """(attempt, round) of a checkpoint file or of a temporary file of one; None for other files."""
    base = name.split(".pt.", 1)[0] + ".pt" if name.endswith(TEMPORARY_SUFFIX) else name
    if base == LEGACY_NAME:
        return 0, 0
    match = _NAME.match(base)
    return (int(match[1]), int(match[2])) if match else None


def current_checkpoint(run_dir: Path, name: str | None) -> Path | None:
    """The file of a run's current checkpoint for a reader outside the run (a model download): ``name``
    as the run's row names it (``runs.checkpoint``) in the run's artifact directory ``run_dir``; None
    when the row names none. Never "the newest file": a file being written is not named yet."""
    if name is None:
        return None
    if name != LEGACY_NAME and not _NAME.match(name):
        raise ValueError(f"{name!r} is not the name of a checkpoint file")
    return run_dir / name


class RunCheckpoints:
    """The ``Checkpoints`` of one attempt of a run (``for_segment`` gives each segment's view)."""

    def __init__(
        self, directory: Path, artifact_dir: Path, store: RunStore, lease: Lease, run: ClaimedRun
    ) -> None:
        self.directory = directory
        self.artifact_dir = artifact_dir
        self.store = store
        self.lease = lease
        self._attempt = run.attempt
        self._rounds_in_db = run.rounds_done
        self._named_at_claim = run.checkpoint
        self._current = run.checkpoint
        self._next_round: int | None = None  # of the current checkpoint, once read or written
        self._payload: dict[str, Any] | None = None  # read, not yet handed to a runner

    def next_round(self) -> int:
        """The round the current checkpoint continues at (0: none)."""
        if self._next_round is None:
            self._payload = self._read()
            self._next_round = 0 if self._payload is None else int(self._payload["next_round"])
        return self._next_round

    def load(self) -> dict[str, Any] | None:
        self.next_round()
        payload = self._payload if self._payload is not None else self._read()
        self._payload = None  # the runner keeps what it needs of it
        return payload

    def save(self, payload: dict[str, Any]) -> None:
        next_round = int(payload["next_round"])
        name = checkpoint_name(self._attempt, next_round)
        try:
            write_checkpoint(self.directory / name, payload)
        except OSError as err:
            owned = through_outage(lambda: lifecycle.renew(self.store, self.lease), f"{self}: lease check")
            if not owned:  # taken over: the owner removed our file
                raise LeaseLost(f"run {self.lease.run_id}: taken over during a checkpoint write") from err
            reason = err.strerror or type(err).__name__
            raise CheckpointNotWritable(
                f"cannot write the run's checkpoint in {self.directory} ({reason}): make it writable by "
                f"the worker (the run's folder in the artifact directory {self.artifact_dir}, "
                "COLLAPIPE_ARTIFACT_DIR, on every worker host), then resume the run: it continues from "
                "its last checkpoint"
            ) from err
        # LeaseLost: our file stays unnamed
        through_outage(
            lambda: lifecycle.record_checkpoint(self.store, self.lease, name),
            f"run {self.lease.run_id}: naming checkpoint {name}",
        )
        self._current, self._next_round, self._payload = name, next_round, None
        self._delete_older(next_round)

    def for_segment(self, segment: Segment) -> SegmentCheckpoints:
        return SegmentCheckpoints(self, segment)

    def __str__(self) -> str:
        return str(self.directory / (self._current or ""))

    def _read(self) -> dict[str, Any] | None:
        if self._current is None:
            return None
        path = self.directory / self._current
        if self._current != self._named_at_claim:  # written by this attempt
            return read_checkpoint(path)
        try:
            payload = read_checkpoint(path)
        except (OSError, ValueError, RuntimeError) as err:  # lost or damaged artifacts
            run_id = self.lease.run_id
            log.error("run %s: checkpoint %s cannot be read (%s); replaying from round 0", run_id, path, err)
            payload = None
        if payload is not None and int(payload["next_round"]) > self._rounds_in_db:
            log.warning(
                "run %s: checkpoint %s at round %s is ahead of the database (%d rounds); replaying from "
                "round 0",
                self.lease.run_id,
                path,
                payload["next_round"],
                self._rounds_in_db,
            )
            payload = None
        if payload is None:
            self._current = None
        return payload

    def _delete_older(self, next_round: int) -> None:
        """Delete earlier attempts' files and this attempt's earlier rounds (the current one is named)."""
        try:
            names = [entry.name for entry in self.directory.iterdir()]
        except OSError:
            return
        for name in names:
            found = _attempt_and_round(name)
            if found is None:
                continue
            attempt, round_index = found
            if attempt < self._attempt or (attempt == self._attempt and round_index < next_round):
                with contextlib.suppress(OSError):  # another process deleted it, or it cannot be: harmless
                    (self.directory / name).unlink(missing_ok=True)


class SegmentCheckpoints:
    """A segment's view: the checkpoint taken at the segment's first round is read re-labelled with
    the segment's config (``segments.relabelled``)."""

    def __init__(self, checkpoints: RunCheckpoints, segment: Segment) -> None:
        self.checkpoints = checkpoints
        self.segment = segment

    def load(self) -> dict[str, Any] | None:
        payload = self.checkpoints.load()
        return None if payload is None else relabelled(payload, self.segment)

    def save(self, payload: dict[str, Any]) -> None:
        self.checkpoints.save(payload)

    def __str__(self) -> str:
        return str(self.checkpoints)
