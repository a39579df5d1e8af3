"""The hot endpoints' orjson bodies are the text pydantic writes for the same response model."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

from backend.json_response import json_bytes, json_response
from backend.metrics.schemas import Series
from backend.runs.schemas import RunListItem

RUN = {
    "id": 7,
    "name": "sweep V=10",
    "experiment_id": None,
    "status": "running",
    "owner_id": 1,
    "created_at": datetime(2026, 1, 2, 3, 4, 5, 123, tzinfo=UTC),
    "started_at": datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
    "finished_at": None,
    "rounds_done": 3,
    "total_rounds": 10,
    "error": None,
    "cancel_requested": False,
    "attempt": 1,
    "parent_run_id": None,
    "fork_round": None,
    "policy": "dssda",
    "executor": "simulated",
    "V": 10.0,
    "num_clusters": 2,
    "devices_per_cluster": 3,
    "owner_name": "ada",
    "latest_round": 2,
    "latest_latency_s": 0.125,
    "latest_eval_round": 1,
    "latest_eval_loss": 2.5,
    "latest_eval_perplexity": None,
    "latest_eval_accuracy": 0.75,
}


def test_run_row_is_written_as_pydantic_writes_it() -> None:
    assert json_bytes(RUN) == RunListItem.model_validate(RUN).model_dump_json().encode()


def test_naive_datetimes_stay_without_offset() -> None:
    naive = {**RUN, "created_at": datetime(2026, 1, 2, 3, 4, 5), "started_at": None}
    assert json_bytes(naive) == RunListItem.model_validate(naive).model_dump_json().encode()


def test_floats_match_and_non_finite_become_null() -> None:
    series = {"round": [1.0, 2.5, 1e-7], "value": [0.1, 123456789012345678.0, 3.0]}
    assert json_bytes(series) == Series.model_validate(series).model_dump_json().encode()
    assert json.loads(json_bytes([math.nan, math.inf, -math.inf])) == [None, None, None]


def test_response_carries_json_media_type() -> None:
    response = json_response({"a": 1})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.body == b'{"a":1}'
