"""Resume and fork on Celery workers reproduce what an uninterrupted run computes in-process."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack
from tests.integration.runs import (
    TERMINAL,
    comparable,
    config_json,
    continuous_records,
    launch,
    stored_rounds,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]


def test_a_resumed_run_equals_an_uninterrupted_one(stack: Stack) -> None:
    rounds = 30
    config = config_json(rounds)
    stack.processes.start_worker()
    with stack.client() as client:
        run_id = launch(client, config)
        wait_for(client, run_id, 60, stack.processes.logs, status=("running",), rounds_done=3)
        assert client.post(f"/api/runs/{run_id}/cancel").status_code == 200
        cancelled = wait_for(client, run_id, 30, stack.processes.logs, status=TERMINAL)
        assert cancelled["status"] == "cancelled" and cancelled["rounds_done"] < rounds
        response = client.post(f"/api/runs/{run_id}/resume")
        assert response.status_code == 200, response.text
        run = wait_for(client, run_id, 60, stack.processes.logs, status=TERMINAL)
    assert (run["status"], run["rounds_done"], run["attempt"]) == ("succeeded", rounds, 2)
    stored = stored_rounds(stack.database_url, run_id)
    assert [r["round"] for r in stored] == list(range(rounds))
    assert [comparable(r) for r in stored] == continuous_records(config)


def test_a_fork_continues_from_the_parents_state_at_round_k(stack: Stack) -> None:
    rounds, k = 12, 5
    parent_config = config_json(rounds)
    stack.processes.start_worker()
    with stack.client() as client:
        parent_id = launch(client, parent_config)
        assert wait_for(client, parent_id, 60, stack.processes.logs, status=TERMINAL)["status"] == "succeeded"
        body = {"round": k, "policy": "fixed", "segments": [2, 1, 1]}
        response = client.post(f"/api/runs/{parent_id}/fork", json=body)
        assert response.status_code == 201, response.text
        fork = response.json()
        run = wait_for(client, fork["id"], 60, stack.processes.logs, status=TERMINAL)
    assert run["status"] == "succeeded", run
    assert (fork["parent_run_id"], fork["fork_round"]) == (parent_id, k)

    fork_config = {**parent_config, "scheduler": {**parent_config["scheduler"], **body}}
    fork_config["scheduler"].pop("round")
    stored = [comparable(r) for r in stored_rounds(stack.database_url, fork["id"])]
    assert [r["policy"] for r in stored] == ["uniform"] * k + ["fixed"] * (rounds - k)
    assert stored == continuous_records(parent_config, switch_at=k, then=fork_config)
    parent = [comparable(r) for r in stored_rounds(stack.database_url, parent_id)]
    assert stored[:k] == parent[:k]
