"""SIGKILL of a worker at any point of a round: the run finishes with every round exactly once in the
database and exactly once on the live stream (no tolerance).

The killed worker's message stays unacknowledged; recovery comes from the reaper (the run's lease
expires after 3 s, the run is re-queued and re-sent) and from the broker's redelivery of the
original message — whichever arrives second finds the run taken and is skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import Stack
from tests.integration.runs import (
    TERMINAL,
    comparable,
    config_json,
    continuous_records,
    launch,
    stored_rounds,
    stream_rounds,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]

ROUNDS = 60
# Every place a worker can die in a round (collapipe_core/faults.py), one run crashing at each in turn:
# inside the round's transaction, right after its commit, between the checkpoint's write and rename
# (keyed by the round it continues at), while waking the live readers, and inside the final status
# change. Each crash kills the Celery pool process that runs the task.
CRASH_POINTS = (
    "round-before-commit@2",
    "round-after-commit@4",
    "checkpoint-write@7",
    "relay-publish@9",
    "status-change@succeeded",
)


def _assert_exactly_once(stack: Stack, run_id: int, rounds: int) -> list[tuple[str, str, dict]]:  # type: ignore[type-arg]
    stored = stored_rounds(stack.database_url, run_id)
    assert [r["round"] for r in stored] == list(range(rounds))  # no gap, no duplicate
    events = stack.stream(run_id)
    assert stream_rounds(events) == list(range(rounds))  # every round once, in order
    ids = [int(event_id) for event_id, _kind, _data in events]
    assert ids == sorted(set(ids))
    # a client that reconnects with Last-Event-ID in the middle gets exactly the rest
    middle = len(events) // 2
    assert stack.stream(run_id, after=events[middle][0]) == events[middle + 1 :]
    return events


def test_a_killed_workers_run_finishes_elsewhere_with_every_round_exactly_once(stack: Stack) -> None:
    first = stack.processes.start_worker()
    stack.processes.start_reaper(interval_s=0.5)
    config = config_json(ROUNDS)
    with stack.client() as client:
        run_id = launch(client, config)
        before = wait_for(client, run_id, 60, stack.processes.logs, status=("running",), rounds_done=5)
        first.kill()
        assert not first.alive()
        stack.processes.start_worker()
        run = wait_for(client, run_id, 90, stack.processes.logs, status=TERMINAL)

    assert run["status"] == "succeeded", run
    assert run["rounds_done"] == ROUNDS and run["attempt"] >= 2
    stored = stored_rounds(stack.database_url, run_id)
    assert all(r["_num_devices"] == 6 for r in stored)
    # resumed from the checkpoint, the records are those of a run that was never interrupted
    assert [comparable(r) for r in stored] == continuous_records(config)
    events = _assert_exactly_once(stack, run_id, ROUNDS)
    statuses = [data["status"] for _id, kind, data in events if kind == "status"]
    assert statuses[-1] == "succeeded" and statuses.count("running") >= 2
    assert before["rounds_done"] >= 5


def test_sigkill_at_every_point_of_a_round_loses_and_repeats_nothing(stack: Stack, tmp_path: Path) -> None:
    rounds = 12
    markers = tmp_path / "crashes"
    markers.mkdir()
    crash_env = {"COLLAPIPE_CRASH_AT": ",".join(CRASH_POINTS), "COLLAPIPE_CRASH_MARKER": str(markers)}
    stack.processes.start_worker(env=crash_env)
    stack.processes.start_reaper(interval_s=0.5)
    config = config_json(rounds, executor="analytic")
    with stack.client() as client:
        run_id = launch(client, config)
        run = wait_for(client, run_id, 150, stack.processes.logs, status=TERMINAL)
    assert sorted(p.name for p in markers.iterdir()) == sorted(CRASH_POINTS)  # each crash happened
    assert run["status"] == "succeeded", run
    assert run["attempt"] >= 1 + len(CRASH_POINTS)  # every crash cost its claim
    stored = stored_rounds(stack.database_url, run_id)
    assert [comparable(r) for r in stored] == continuous_records(config)
    _assert_exactly_once(stack, run_id, rounds)


def test_a_cancel_requested_while_the_worker_is_gone_still_ends_the_run(stack: Stack) -> None:
    first = stack.processes.start_worker()
    with stack.client() as client:
        run_id = launch(client, config_json(ROUNDS))
        wait_for(client, run_id, 60, stack.processes.logs, status=("running",), rounds_done=3)
        first.kill()
        response = client.post(f"/api/runs/{run_id}/cancel")
        assert response.status_code == 200, response.text
        stack.processes.start_reaper(interval_s=0.5)
        stack.processes.start_worker()
        run = wait_for(client, run_id, 60, stack.processes.logs, status=TERMINAL)
    assert run["status"] == "cancelled"
    assert [r["round"] for r in stored_rounds(stack.database_url, run_id)] == list(range(run["rounds_done"]))
