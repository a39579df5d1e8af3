"""A run launched through the API is executed by a Celery worker: rounds land in PostgreSQL and on the
run's live stream in order."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack
from tests.integration.runs import comparable, config_json, launch, stored_rounds, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery]


def test_rounds_land_in_the_database_and_on_the_stream_in_order(stack: Stack) -> None:
    stack.processes.start_worker()
    rounds = 8
    with stack.client() as client:
        run_id = launch(client, config_json(rounds))
        run = wait_for(client, run_id, 60, stack.processes.logs, status=("succeeded", "failed", "cancelled"))
    assert run["status"] == "succeeded", run
    assert run["rounds_done"] == rounds and run["attempt"] == 1

    stored = stored_rounds(stack.database_url, run_id)
    assert [r["round"] for r in stored] == list(range(rounds))
    assert all(r["_num_devices"] == 6 for r in stored)  # 2 clusters x 3 devices

    events = stack.stream(run_id)
    kinds = [kind for _id, kind, _data in events]
    statuses = [data["status"] for _id, kind, data in events if kind == "status"]
    assert statuses == ["queued", "running", "succeeded"]
    assert kinds[:2] == ["status", "status"] and kinds[-1] == "status"
    published = [data for _id, kind, data in events if kind == "round"]
    assert [p["round"]["round"] for p in published] == list(range(rounds))
    assert all(len(p["devices"]) == 6 for p in published)
    # the live event carries what the database stored
    assert [comparable(p["round"]) for p in published] == [comparable(r) for r in stored]
