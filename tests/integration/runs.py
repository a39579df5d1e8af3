"""Helpers of the integration tests: tiny configs, launching through the API, reading the results."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import create_engine, text

from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from collapipe_core.validation import parse_config
from tests.core.builders import tiny_config
from tests.integration.processes import wait_until

TERMINAL = ("succeeded", "failed", "cancelled")


def config_json(rounds: int, executor: str = "simulated", **sections: Any) -> dict[str, Any]:
    """A tiny two-cluster synthetic-parity config as the API takes it (~50 ms a simulated round)."""
    training = {"rounds": rounds, **sections.pop("training", {})}
    config = tiny_config(executor=executor, training=training, **sections)
    data: dict[str, Any] = config.model_dump(mode="json", by_alias=True)
    return data


def launch(client: httpx.Client, config: dict[str, Any]) -> int:
    response = client.post("/api/runs", json={"config": config})
    assert response.status_code == 201, response.text
    run_id: int = response.json()["id"]
    return run_id


def get_run(client: httpx.Client, run_id: int) -> dict[str, Any]:
    response = client.get(f"/api/runs/{run_id}")
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


def wait_for(
    client: httpx.Client, run_id: int, timeout_s: float, explain: Any, **where: Any
) -> dict[str, Any]:
    """Poll the run until ``status`` is one of ``where['status']`` and/or ``rounds_done >= n``."""
    statuses = where.get("status")
    min_rounds = where.get("rounds_done", 0)
    seen: dict[str, Any] = {}

    def ready() -> bool:
        seen.update(get_run(client, run_id))
        return (statuses is None or seen["status"] in statuses) and seen["rounds_done"] >= min_rounds

    wait_until(ready, timeout_s, lambda: f"run {run_id}: {seen}\n{explain()}", poll_s=0.1)
    return seen


def stored_rounds(database_url: str, run_id: int) -> list[dict[str, Any]]:
    """The run's round records as stored, ordered by round (straight from PostgreSQL)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT round, record FROM round_metrics WHERE run_id = :r ORDER BY round, id"),
                {"r": run_id},
            ).all()
            devices = conn.execute(
                text("SELECT round, count(*) FROM device_metrics WHERE run_id = :r GROUP BY round"),
                {"r": run_id},
            ).all()
    finally:
        engine.dispose()
    per_round: dict[int, int] = {int(r): int(n) for r, n in devices}
    records = []
    for number, record in rows:
        assert record["round"] == number
        records.append({**record, "_num_devices": per_round.get(number, 0)})
    return records


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A round record without its wall-clock field (solve_time_s) and test annotations."""
    return {k: v for k, v in record.items() if k != "solve_time_s" and not k.startswith("_")}


def continuous_records(
    config: dict[str, Any], switch_at: int | None = None, then: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Round records of the same config run uninterrupted in this process (the reference).

    With ``switch_at``/``then``: rounds from ``switch_at`` on run under config ``then``, continuing
    from the state the first config reached (what a fork at round ``switch_at`` must reproduce).
    """
    first = MemorySink()
    runner = Runner(parse_config(config), first)
    runner.run(max_rounds=switch_at)
    results = list(first.results)
    if switch_at is not None and then is not None:
        second = MemorySink()
        follower = Runner(parse_config(then), second)
        follower.next_round = runner.next_round
        follower.queues = runner.queues.copy()
        follower.executor.load_state_dict(runner.executor.state_dict())
        follower.gradient_noise = runner.gradient_noise  # the running averages behind B_noise
        follower.previous = runner.previous  # the placement the last round left (moved blocks)
        follower.run()
        results += second.results
    return [comparable(r.round.to_json()) for r in results]


def stream_rounds(events: list[tuple[str, str, dict[str, Any]]]) -> list[int]:
    return [data["round"]["round"] for _id, kind, data in events if kind == "round"]
