"""execute_run: claim, idempotent rounds, checkpoint/DB reconciliation, fencing, failure, forks."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import DeviceMetric, RoundMetric, Run, RunEvent
from backend.live.channel import ROUND, STATUS, LiveEvent
from backend.runtime import lifecycle
from backend.runtime.execution import checkpoint_dir_for, execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.builders import event_summary, insert_run, service_workspace, stored_records, tiny_config

Factory = sessionmaker[Session]


class HookWake:
    """Calls ``on_round(round_index)`` after each newly recorded round's commit."""

    def __init__(self, on_round: Any = None) -> None:
        self.on_round = on_round

    def notify(self, key: object, events: Sequence[LiveEvent]) -> None:
        if isinstance(key, int) and self.on_round is not None:
            self.on_round(key)


def _run(
    factory: Factory, run_id: int, tmp_path: Path, wake: HookWake | None = None, claimant: str = "w1"
) -> str:
    return execute_run(
        run_id,
        RunStore(factory, wake or HookWake()),
        claimant=claimant,
        artifact_dir=tmp_path,
        workspace=service_workspace(tmp_path / "data"),
        lease_s=30.0,
    )


def _row(factory: Factory, run_id: int) -> Run:
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def _counts(factory: Factory, run_id: int) -> tuple[int, int]:
    with factory() as session:
        rounds = session.scalar(
            select(func.count()).select_from(RoundMetric).where(RoundMetric.run_id == run_id)
        )
        devices = session.scalar(
            select(func.count()).select_from(DeviceMetric).where(DeviceMetric.run_id == run_id)
        )
        return int(rounds or 0), int(devices or 0)


def _set(factory: Factory, run_id: int, **values: Any) -> None:
    with factory() as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))
        session.commit()


def _cancel_after(factory: Factory, run_id: int, round_index: int) -> HookWake:
    def hook(r: int) -> None:
        if r == round_index:
            _set(factory, run_id, cancel_requested=True)

    return HookWake(hook)


def test_a_run_stores_and_publishes_every_round_once_in_order(
    session_factory: Factory, tmp_path: Path
) -> None:
    run_id = insert_run(session_factory)
    assert _run(session_factory, run_id, tmp_path) == "succeeded"
    run = _row(session_factory, run_id)
    assert (run.status, run.rounds_done, run.attempt, run.lease_owner) == ("succeeded", 5, 1, None)
    assert run.started_at is not None and run.finished_at is not None and run.finished_at >= run.started_at
    assert _counts(session_factory, run_id) == (5, 5 * 6)
    assert event_summary(session_factory, run_id) == [
        (STATUS, "running"),
        *((ROUND, r) for r in range(5)),
        (STATUS, "succeeded"),
    ]


def test_a_duplicate_delivery_is_skipped_while_the_lease_is_live(
    session_factory: Factory, tmp_path: Path
) -> None:
    run_id = insert_run(session_factory)
    assert lifecycle.claim(RunStore(session_factory), run_id, "other", 30.0) is not None
    assert _run(session_factory, run_id, tmp_path) == "skipped"
    assert event_summary(session_factory, run_id) == [(STATUS, "running")]
    assert _counts(session_factory, run_id) == (0, 0)


def test_cancel_requested_stops_between_rounds(session_factory: Factory, tmp_path: Path) -> None:
    run_id = insert_run(session_factory)
    assert _run(session_factory, run_id, tmp_path, _cancel_after(session_factory, run_id, 1)) == "cancelled"
    run = _row(session_factory, run_id)
    assert (run.status, run.rounds_done, run.cancel_requested) == ("cancelled", 2, False)


@pytest.mark.parametrize("case", ["checkpoint_behind_db", "checkpoint_ahead_of_db"])
def test_resume_reconciles_checkpoint_and_database(
    session_factory: Factory, tmp_path: Path, case: str
) -> None:
    """The DB's rounds are the truth: whichever side is behind, every round ends up stored exactly once."""
    reference = insert_run(session_factory)
    assert _run(session_factory, reference, tmp_path) == "succeeded"
    run_id = insert_run(session_factory)
    assert _run(session_factory, run_id, tmp_path, _cancel_after(session_factory, run_id, 2)) == "cancelled"
    assert _counts(session_factory, run_id)[0] == 3  # checkpoint at round 3 too
    with session_factory() as session:
        if case == "checkpoint_behind_db":  # round 3 committed, then a crash before its checkpoint
            for table in (RoundMetric, DeviceMetric):
                rows = (
                    session.execute(select(table).where(table.run_id == reference, table.round == 3))
                    .scalars()
                    .all()
                )
                for row in rows:
                    values = {c.name: getattr(row, c.name) for c in table.__table__.columns if c.name != "id"}
                    session.add(table(**{**values, "run_id": run_id}))
            # with its live event, as record_round commits them together
            session.add(RunEvent(run_id=run_id, kind=ROUND, data={"round": {"round": 3}, "devices": []}))
            rounds_done = 4
        else:  # rounds lost from the DB after their checkpoint (their events with them): replay
            for table in (RoundMetric, DeviceMetric):
                session.execute(delete(table).where(table.run_id == run_id, table.round == 2))
            events = session.scalars(
                select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == ROUND)
            )
            for event in events:
                if event.data["round"]["round"] == 2:
                    session.delete(event)
            rounds_done = 2
        session.execute(update(Run).where(Run.id == run_id).values(status="queued", rounds_done=rounds_done))
        session.commit()
    assert _run(session_factory, run_id, tmp_path, claimant="w2") == "succeeded"
    assert stored_records(session_factory, run_id) == stored_records(session_factory, reference)
    assert _counts(session_factory, run_id) == (5, 30)
    # the stream has each round once: round 3 (stored) is not re-published when it is re-run, round
    # 2 (lost, re-run and stored again) is published again
    published = [r for kind, r in event_summary(session_factory, run_id) if kind == ROUND]
    assert sorted(published) == [0, 1, 2, 3, 4]
    assert _row(session_factory, run_id).rounds_done == 5


def test_a_claimant_that_lost_its_lease_stops_without_writing(
    session_factory: Factory, tmp_path: Path
) -> None:
    run_id = insert_run(session_factory)

    def steal(r: int) -> None:
        if r == 1:
            _set(session_factory, run_id, lease_owner="thief")

    assert _run(session_factory, run_id, tmp_path, HookWake(steal)) == "lease_lost"
    run = _row(session_factory, run_id)
    assert (run.status, run.lease_owner, run.rounds_done) == ("running", "thief", 2)
    assert _counts(session_factory, run_id)[0] == 2


def test_a_worker_without_the_runs_policy_fails_it_naming_the_policy(
    session_factory: Factory, tmp_path: Path
) -> None:
    """The API registered the policy, this worker did not: the run fails with a message naming it."""
    run_id = insert_run(session_factory, tiny_config(scheduler={"policy": "team-policy"}))
    assert _run(session_factory, run_id, tmp_path) == "failed"
    run = _row(session_factory, run_id)
    assert run.status == "failed" and run.error is not None
    assert "cannot run this config" in run.error and "scheduler.policy" in run.error
    assert "'team-policy' is not registered" in run.error and "COLLAPIPE_POLICIES" in run.error
    assert event_summary(session_factory, run_id)[-1] == (STATUS, "failed")


def test_an_error_marks_the_run_failed_with_its_message(session_factory: Factory, tmp_path: Path) -> None:
    run_id = insert_run(session_factory, tiny_config(network={"trace_file": "gone.csv"}))
    assert _run(session_factory, run_id, tmp_path) == "failed"
    run = _row(session_factory, run_id)
    assert run.error is not None and "network.trace_file" in run.error and "gone.csv" in run.error


def test_a_fork_replays_the_parent_to_round_k_then_switches(session_factory: Factory, tmp_path: Path) -> None:
    parent_config = tiny_config(training={"rounds": 6})
    parent = insert_run(session_factory, parent_config)
    assert _run(session_factory, parent, tmp_path) == "succeeded"
    fork_config = tiny_config(training={"rounds": 6}, scheduler={"policy": "fixed", "segments": [1, 1, 2]})
    replay = [{"until_round": 3, "config": parent_config}]
    fork = insert_run(session_factory, fork_config, replay_configs=replay, parent_run_id=parent, fork_round=3)
    assert _run(session_factory, fork, tmp_path) == "succeeded"
    parent_records, fork_records = (
        stored_records(session_factory, parent),
        stored_records(session_factory, fork),
    )
    assert fork_records[:3] == parent_records[:3]
    assert [r["policy"] for r in fork_records] == ["uniform"] * 3 + ["fixed"] * 3
    assert fork_records[3]["decision"] != parent_records[3]["decision"]
    # the switch moves blocks: round 3 is charged against the placement the replay left at round 2
    moved = _moved_blocks(parent_records[2]["decision"], fork_records[3]["decision"])
    assert moved > 0 and fork_records[3]["blocks_moved"] == moved
    assert fork_records[4]["blocks_moved"] == 0


def _moved_blocks(before: dict[str, Any], after: dict[str, Any]) -> int:
    """TEBs whose device differs between two pipeline decisions (segments contiguous in device order)."""
    moved = 0
    for old, new in zip(before["clusters"], after["clusters"], strict=True):
        holder_old = [k for k, d in enumerate(old["devices"]) for _ in range(d["num_blocks"])]
        holder_new = [k for k, d in enumerate(new["devices"]) for _ in range(d["num_blocks"])]
        moved += sum(a != b for a, b in zip(holder_old, holder_new, strict=True))
    return moved


def test_a_fork_resumed_mid_replay_finishes_identically(session_factory: Factory, tmp_path: Path) -> None:
    parent_config = tiny_config(training={"rounds": 6})
    fork_config = tiny_config(training={"rounds": 6}, scheduler={"V": 5.0})
    replay = [{"until_round": 4, "config": parent_config}]
    straight = insert_run(session_factory, fork_config, replay_configs=replay)
    assert _run(session_factory, straight, tmp_path) == "succeeded"
    interrupted = insert_run(session_factory, fork_config, replay_configs=replay)
    assert (
        _run(session_factory, interrupted, tmp_path, _cancel_after(session_factory, interrupted, 1))
        == "cancelled"
    )
    _set(session_factory, interrupted, status="queued")
    assert _run(session_factory, interrupted, tmp_path, claimant="w2") == "succeeded"
    assert stored_records(session_factory, interrupted) == stored_records(session_factory, straight)


def test_a_run_without_a_checkpoint_directory_starts_fresh(session_factory: Factory, tmp_path: Path) -> None:
    run_id = insert_run(session_factory)
    assert _run(session_factory, run_id, tmp_path, _cancel_after(session_factory, run_id, 0)) == "cancelled"
    shutil.rmtree(checkpoint_dir_for(tmp_path, run_id))  # artifacts lost: the DB still has round 0
    _set(session_factory, run_id, status="queued")
    assert _run(session_factory, run_id, tmp_path, claimant="w2") == "succeeded"
    assert _counts(session_factory, run_id) == (5, 30)


def test_a_simulated_fork_carries_the_trained_weights_across_the_switch(
    session_factory: Factory, tmp_path: Path
) -> None:
    """With real training, a fork that switches to the same config reproduces the parent exactly:
    weights, optimizer state and RNG at round k come through the replay and the relabelled checkpoint."""
    config = tiny_config(executor="simulated", training={"rounds": 3})
    parent = insert_run(session_factory, config)
    fork = insert_run(session_factory, config, replay_configs=[{"until_round": 2, "config": config}])
    assert _run(session_factory, parent, tmp_path) == "succeeded"
    assert _run(session_factory, fork, tmp_path) == "succeeded"
    parent_records = stored_records(session_factory, parent)
    assert parent_records[-1]["train_loss"] is not None
    assert stored_records(session_factory, fork) == parent_records


@pytest.mark.deployments("embedded")  # the replay is the core's; the store's part is tested on both above
def test_a_finished_run_continued_by_a_fork_with_more_rounds_trains_as_a_longer_run(
    session_factory: Factory, tmp_path: Path
) -> None:
    """A fork at a finished run's last round with more rounds (POST /api/runs/{id}/fork {round: k,
    rounds}) replays the parent's k rounds and trains on: the records of an uninterrupted longer run
    (the weights and optimizer state at k come through the replay, or round k's losses would differ)."""
    short = tiny_config(executor="simulated", training={"rounds": 1})
    longer = tiny_config(executor="simulated", training={"rounds": 2})
    parent = insert_run(session_factory, short)
    continued = insert_run(session_factory, longer, replay_configs=[{"until_round": 1, "config": short}])
    straight = insert_run(session_factory, longer)
    for run_id in (parent, continued, straight):
        assert _run(session_factory, run_id, tmp_path) == "succeeded"
    records = stored_records(session_factory, continued)
    assert len(records) == 2 and records[-1]["eval_loss"] is not None
    assert records[:1] == stored_records(session_factory, parent)
    assert records == stored_records(session_factory, straight)
