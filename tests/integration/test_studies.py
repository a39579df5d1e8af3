"""A study on two Celery worker processes: its runs are executed by both workers, none twice.

Who executes a run is its lease owner, ``host:pid:task id:random`` (workers/tasks.py), held while the
run runs and cleared when it finishes; the test samples the study's lease owners from PostgreSQL while
the study runs and tells the workers apart by the pid (each worker's single pool process is a child of
the worker process the test started). "None twice": every run was claimed once (attempt 1, one
``running`` status event), stored every round exactly once and sent it once on the study's stream.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.integration.conftest import Stack
from tests.integration.processes import Service, wait_until
from tests.integration.runs import config_json, stored_rounds
from tests.integration.sse import sse_events

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]

ROUNDS = 12
SEEDS = [0, 1, 2, 3]
POLICIES = ["uniform", "proportional"]


def _ready_workers(stack: Stack, count: int) -> list[Service]:
    """``count`` Celery workers (one pool process each), all consuming the queue by now."""
    workers = [stack.processes.start_worker(loglevel="info") for _ in range(count)]
    for worker in workers:
        wait_until(partial(_is_ready, worker), 60, worker.log, poll_s=0.1)
    return workers


def _is_ready(worker: Service) -> bool:
    return " ready." in worker.log()


def _parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past the command name


def _pids(claimants: dict[int, set[str]]) -> set[int]:
    """The claimants' process ids (``host:pid:task id:random``)."""
    return {int(owner.split(":")[1]) for owners in claimants.values() for owner in owners}


def _sample_claimants(stack: Stack, study_id: int, timeout_s: float) -> dict[int, set[str]]:
    """Every run's lease owners seen, polling ``runs`` until no run of the study is queued or running."""
    seen: dict[int, set[str]] = defaultdict(set)
    engine = create_engine(stack.database_url)
    deadline = time.monotonic() + timeout_s
    try:
        with engine.connect() as conn:
            while True:
                rows = conn.execute(
                    text("SELECT id, status, lease_owner FROM runs WHERE study_id = :s"), {"s": study_id}
                ).all()
                conn.rollback()  # a fresh snapshot next time
                for run_id, _status, owner in rows:
                    if owner is not None:
                        seen[run_id].add(owner)
                if rows and all(status not in ("queued", "running") for _id, status, _owner in rows):
                    return seen
                assert time.monotonic() < deadline, (
                    f"study {study_id} unfinished: {rows}\n{stack.processes.logs()}"
                )
                time.sleep(0.005)
    finally:
        engine.dispose()


def test_a_studys_runs_are_executed_by_both_workers_none_twice(stack: Stack) -> None:
    workers = _ready_workers(stack, 2)
    body = {
        "name": "two workers",
        "bases": [{"name": "tiny", "config": config_json(ROUNDS, executor="analytic")}],
        "axes": [{"field": "scheduler.policy", "values": POLICIES}, {"field": "seed", "values": SEEDS}],
        "concurrency": 2,
    }
    with stack.client() as client:
        response = client.post("/api/studies", json=body)
        assert response.status_code == 201, response.text
        study_id = response.json()["id"]
        claimants = _sample_claimants(stack, study_id, timeout_s=60)
        study = client.get(f"/api/studies/{study_id}").json()
        with client.stream("GET", f"/api/studies/{study_id}/events", timeout=60) as stream:
            assert stream.status_code == 200, stream.read()
            events = list(sse_events(stream))
    pool_parents = {pid: _parent_pid(pid) for pid in _pids(claimants)}  # while the workers live
    for worker in workers:
        worker.kill()  # the study is done: nothing of theirs to finish (a warm shutdown takes seconds)

    num_runs = len(POLICIES) * len(SEEDS)
    assert study["progress"]["status"] == "succeeded", study
    assert study["progress"]["runs_done"] == num_runs
    assert study["progress"]["rounds_done"] == num_runs * ROUNDS

    # both workers appear as claimants: each pid seen is one worker's pool process
    assert set(pool_parents.values()) == {w.pid for w in workers}, claimants
    assert all(len(owners) == 1 for owners in claimants.values()), claimants

    # none twice: one claim per run, every round stored once and streamed once
    run_ids = sorted(run["id"] for cell in study["cells"] for run in cell["runs"])
    engine = create_engine(stack.database_url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, attempt FROM runs WHERE study_id = :s"), {"s": study_id})
        attempts = {int(run_id): int(attempt) for run_id, attempt in rows}
    engine.dispose()
    assert attempts == dict.fromkeys(run_ids, 1)
    for run_id in run_ids:
        assert [r["round"] for r in stored_rounds(stack.database_url, run_id)] == list(range(ROUNDS))
    running = Counter(
        e.data["run_id"] for e in events if e.kind == "status" and e.data["status"] == "running"
    )
    assert running == dict.fromkeys(run_ids, 1)
    streamed = Counter((e.data["run_id"], e.data["round"]) for e in events if e.kind == "round")
    assert streamed == {(run_id, r): 1 for run_id in run_ids for r in range(ROUNDS)}
