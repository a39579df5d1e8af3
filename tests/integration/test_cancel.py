"""Cancelling through the API: a running run stops after its current round; a queued one never starts."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import Stack
from tests.integration.processes import wait_until
from tests.integration.runs import (
    TERMINAL,
    config_json,
    get_run,
    launch,
    stored_rounds,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]


def test_a_running_run_stops_after_its_current_round(stack: Stack) -> None:
    stack.processes.start_worker()
    with stack.client() as client:
        run_id = launch(client, config_json(400))
        wait_for(client, run_id, 60, stack.processes.logs, status=("running",), rounds_done=2)
        response = client.post(f"/api/runs/{run_id}/cancel")
        assert response.status_code == 200, response.text
        run = wait_for(client, run_id, 30, stack.processes.logs, status=TERMINAL)
    assert run["status"] == "cancelled"
    assert 2 <= run["rounds_done"] < 400
    assert [r["round"] for r in stored_rounds(stack.database_url, run_id)] == list(range(run["rounds_done"]))
    statuses = [data["status"] for _id, kind, data in stack.stream(run_id) if kind == "status"]
    assert statuses[-1] == "cancelled"


def test_a_queued_run_is_cancelled_at_once_and_its_message_is_a_no_op(stack: Stack) -> None:
    with stack.client() as client:
        run_id = launch(client, config_json(5, executor="analytic"))  # no worker yet: it stays queued
        response = client.post(f"/api/runs/{run_id}/cancel")
        assert response.status_code == 200 and response.json()["status"] == "cancelled", response.text
        assert stack.queue_length() == 1  # its message is still in the broker
        stack.processes.start_worker()
        wait_until(lambda: stack.queue_length() == 0, 30, stack.processes.logs)
        time.sleep(1.0)  # let the worker finish the delivery it took
        run = get_run(client, run_id)
    assert (run["status"], run["rounds_done"], run["attempt"]) == ("cancelled", 0, 0)
    assert stored_rounds(stack.database_url, run_id) == []
