"""A run's checkpoints: per-attempt files named by the run's row, safe from claimants that lost their lease.

The frozen-worker trial: a claimant frozen inside its checkpoint write is taken over, then thawed
while the new owner is itself in the middle of writing one. Before per-attempt names both wrote the
same temporary file: the thawed one renamed the owner's half-written file over the checkpoint, and
the owner failed the run (or the next attempt read a torn file).
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.db.engine import make_engine, make_session_factory
from backend.db.models import Run
from backend.live.channel import LiveEvent
from backend.runtime import checkpoints as run_checkpoints
from backend.runtime.execution import checkpoint_dir_for, execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.builders import insert_run, service_workspace, stored_records, tiny_config
from tests.backend.databases import sqlite_url

Factory = sessionmaker[Session]
REAL_SAVE = torch.save
ROUNDS = 6


class NoWake:
    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        pass


class CancelOnClaim:
    """Asks the run to stop as soon as a claimant took it: that claimant stops after its first round."""

    def __init__(self, factory: Factory, run_id: int) -> None:
        self.factory, self.run_id = factory, run_id

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        if key == "running":
            _set(self.factory, self.run_id, cancel_requested=True)


class FreezeInsideCheckpointWrite:
    """``torch.save`` that, in the thread named in ``plan`` and for the checkpoint continuing at the
    round it names, writes half of the file, then waits until the test thaws that thread."""

    def __init__(self, plan: dict[str, int]) -> None:
        self.plan = plan
        self.frozen = {name: threading.Event() for name in plan}
        self.thaw = {name: threading.Event() for name in plan}

    def __call__(self, obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        name = threading.current_thread().name
        if name not in self.plan or self.frozen[name].is_set() or obj.get("next_round") != self.plan[name]:
            REAL_SAVE(obj, f, *args, **kwargs)
            return
        buffer = io.BytesIO()
        REAL_SAVE(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        own = isinstance(f, str | os.PathLike)
        fh = open(f, "wb") if own else f  # noqa: SIM115 (closed below; the write spans the freeze)
        try:
            fh.write(data[: len(data) // 2])
            fh.flush()
            self.frozen[name].set()
            assert self.thaw[name].wait(60), f"{name} was never thawed"
            fh.write(data[len(data) // 2 :])
            fh.flush()
        finally:
            if own:
                fh.close()


def _set(factory: Factory, run_id: int, **values: Any) -> None:
    with factory() as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))
        session.commit()


def _row(factory: Factory, run_id: int) -> Run:
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def _execute(
    factory: Factory, run_id: int, artifacts: Path, claimant: str, wake: Any = None, lease_s: float = 3600.0
) -> str:
    """execute_run as a worker would; a long lease: its renewal thread stays idle during the test."""
    return execute_run(
        run_id,
        RunStore(factory, wake or NoWake()),
        claimant=claimant,
        artifact_dir=artifacts,
        workspace=service_workspace(artifacts.parent / "data"),
        lease_s=lease_s,
    )


def _in_thread(name: str, target: Any) -> tuple[threading.Thread, list[str]]:
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(target()), name=name, daemon=True)
    thread.start()
    return thread, outcome


def _comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "solve_time_s"} for r in records]


def test_a_frozen_claimants_late_checkpoint_write_neither_replaces_nor_tears_the_owners(
    session_factory: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tiny_config(executor="simulated", training={"rounds": ROUNDS})
    artifacts = tmp_path / "artifacts"
    reference = insert_run(session_factory, config)
    assert _execute(session_factory, reference, artifacts, "ref") == "succeeded"

    run_id = insert_run(session_factory, config)
    freeze = FreezeInsideCheckpointWrite({"A": 3, "B": 4})
    monkeypatch.setattr(torch, "save", freeze)
    reads: list[str] = []
    read_checkpoint = run_checkpoints.read_checkpoint

    def recorded_read(path: Path) -> dict[str, Any]:
        payload = read_checkpoint(path)  # a torn file raises here
        reads.append(f"{threading.current_thread().name}:{path.name}")
        return payload

    monkeypatch.setattr(run_checkpoints, "read_checkpoint", recorded_read)

    # A stores rounds 0-2 and freezes inside the write of the checkpoint that continues at round 3
    a, a_outcome = _in_thread("A", lambda: _execute(session_factory, run_id, artifacts, "a"))
    assert freeze.frozen["A"].wait(60), "A never reached its checkpoint write"
    assert _row(session_factory, run_id).checkpoint == "checkpoint-a1-r2.pt"
    # A's lease runs out while it is frozen; B takes the run over and freezes in its own write
    _set(session_factory, run_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    b, b_outcome = _in_thread("B", lambda: _execute(session_factory, run_id, artifacts, "b"))
    assert freeze.frozen["B"].wait(60), "B never reached its checkpoint write"
    assert _row(session_factory, run_id).lease_owner == "b"
    # A thaws while B writes: it finishes its write, then finds its lease gone
    freeze.thaw["A"].set()
    a.join(60)
    assert a_outcome == ["lease_lost"]
    assert "cannot write" not in caplog.text  # A's write failed because B removed it: no false alarm
    freeze.thaw["B"].set()
    b.join(120)

    assert b_outcome == ["succeeded"], _row(session_factory, run_id).error
    run = _row(session_factory, run_id)
    assert (run.status, run.rounds_done, run.attempt) == ("succeeded", ROUNDS, 2)
    records = stored_records(session_factory, run_id)
    assert records[-1]["train_loss"] is not None
    assert _comparable(records) == _comparable(stored_records(session_factory, reference))  # bit-exact
    # B resumed from the checkpoint the row named (A's last complete one) and read no other
    assert reads == ["B:checkpoint-a1-r2.pt"]
    # what is left is the owner's last checkpoint, named by the row; every earlier attempt's is gone
    assert run.checkpoint == f"checkpoint-a2-r{ROUNDS}.pt"
    assert sorted(p.name for p in checkpoint_dir_for(artifacts, run_id).iterdir()) == [run.checkpoint]


def test_a_stale_claimant_that_thaws_after_the_run_ended_changes_nothing(
    session_factory: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thaws after the owner stopped the run: its file is never named, so resuming reads the
    owner's checkpoint, and the records are those of an uninterrupted run."""
    config = tiny_config(executor="simulated", training={"rounds": ROUNDS})
    artifacts = tmp_path / "artifacts"
    reference = insert_run(session_factory, config)
    assert _execute(session_factory, reference, artifacts, "ref") == "succeeded"
    run_id = insert_run(session_factory, config)
    freeze = FreezeInsideCheckpointWrite({"A": 3})
    monkeypatch.setattr(torch, "save", freeze)
    a, a_outcome = _in_thread("A", lambda: _execute(session_factory, run_id, artifacts, "a"))
    assert freeze.frozen["A"].wait(60)
    _set(session_factory, run_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    # B takes over and stops after one round (its checkpoint continues at round 3, like A's)
    b = _execute(session_factory, run_id, artifacts, "b", CancelOnClaim(session_factory, run_id))
    assert b == "cancelled"
    freeze.thaw["A"].set()
    a.join(60)
    assert a_outcome == ["lease_lost"]
    named = _row(session_factory, run_id).checkpoint
    assert named == "checkpoint-a2-r3.pt"
    _set(session_factory, run_id, status="queued")
    assert _execute(session_factory, run_id, artifacts, "c") == "succeeded"
    assert _comparable(stored_records(session_factory, run_id)) == _comparable(
        stored_records(session_factory, reference)
    )


def test_a_missing_named_checkpoint_replays_from_round_zero(session_factory: Factory, tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    run_id = insert_run(session_factory)
    assert _execute(session_factory, run_id, artifacts, "a", CancelOnClaim(session_factory, run_id)) == (
        "cancelled"
    )
    assert _row(session_factory, run_id).checkpoint == "checkpoint-a1-r1.pt"
    shutil.rmtree(checkpoint_dir_for(artifacts, run_id))  # artifacts lost: the DB still has round 0
    _set(session_factory, run_id, status="queued")
    assert _execute(session_factory, run_id, artifacts, "b") == "succeeded"
    assert [r["round"] for r in stored_records(session_factory, run_id)] == list(range(5))


WORKER = """
import sys
from pathlib import Path
from backend.db.engine import make_engine, make_session_factory
from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.builders import service_workspace
url, run_id, artifacts = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
store = RunStore(make_session_factory(make_engine(url)))
print(execute_run(run_id, store, claimant="worker", artifact_dir=artifacts,
                  workspace=service_workspace(artifacts.parent / "data"), lease_s=60.0))
"""


def _worker_process(database_url: str, run_id: int, artifacts: Path) -> str:
    """execute_run in a worker process of its own that a read-only directory stops: when the tests
    run as root, without the capability that lets root write anywhere."""
    unprivileged = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*unprivileged, sys.executable, "-c", WORKER, database_url, str(run_id), str(artifacts)],
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.deployments("embedded")
def test_a_read_only_artifact_directory_fails_the_run_naming_it_and_resume_continues(
    deployment: str, tmp_path: Path
) -> None:
    database_url = sqlite_url(tmp_path)
    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    artifacts = tmp_path / "artifacts"
    run_id = insert_run(factory)
    read_only = stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    checkpoint_dir_for(artifacts, run_id).mkdir(parents=True)
    for directory in (checkpoint_dir_for(artifacts, run_id), artifacts):
        directory.chmod(read_only)

    assert _worker_process(database_url, run_id, artifacts) == "failed"
    run = _row(factory, run_id)
    assert run.status == "failed" and run.error is not None
    assert f"cannot write the run's checkpoint in {artifacts / f'run-{run_id}'}" in run.error
    assert "make it writable" in run.error and f"artifact directory {artifacts}" in run.error
    assert "resume the run" in run.error
    assert "inline_container" not in run.error
    assert run.rounds_done == 1  # the round before the checkpoint is stored

    for directory in (artifacts, checkpoint_dir_for(artifacts, run_id)):
        directory.chmod(0o755)
    _set(factory, run_id, status="queued")
    assert _worker_process(database_url, run_id, artifacts) == "succeeded"
    assert [r["round"] for r in stored_records(factory, run_id)] == list(range(5))
    engine.dispose()


def test_a_reader_outside_the_run_gets_the_file_the_row_names(tmp_path: Path) -> None:
    current_checkpoint = run_checkpoints.current_checkpoint
    (tmp_path / "checkpoint-a2-r9.pt").write_bytes(b"newer, unnamed")
    assert current_checkpoint(tmp_path, "checkpoint-a1-r5.pt") == tmp_path / "checkpoint-a1-r5.pt"
    assert current_checkpoint(tmp_path, "checkpoint.pt") == tmp_path / "checkpoint.pt"  # before 0007
    assert current_checkpoint(tmp_path, None) is None
    for name in ("../checkpoint-a1-r5.pt", "/etc/passwd", "checkpoint-a1-r5.pt.1-ab.tmp"):
        with pytest.raises(ValueError, match="not the name of a checkpoint file"):
            current_checkpoint(tmp_path, name)
