"""Small experiment configs and helpers shared by the backend tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from collapipe_core.scheduler import PolicyRegistry
from collapipe_core.workspace import Workspace

SLOW_POLICY = "slow-uniform"
PACED_POLICY = "paced-uniform"
TEST_POLICIES = {
    SLOW_POLICY: "tests.backend.slow_policy:SlowUniform",
    PACED_POLICY: "tests.backend.slow_policy:PacedUniform",
}
"""Policies the test deployments register (COLLAPIPE_POLICIES), as an operator would."""

TINY_CONFIG: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "executor": "analytic",
    "network": {"num_clusters": 2, "devices_per_cluster": 3, "energy_budget_j": 0.05},
    "model": {
        "kind": "classifier",
        "d_model": 16,
        "num_heads": 2,
        "ffn_dim": 32,
        "num_blocks": 4,
        "seq_len": 12,
    },
    "data": {"dataset": "synthetic-parity", "samples_per_cluster": 64, "eval_samples": 64},
    "training": {"rounds": 5, "local_iterations": 2, "microbatch_size": 4, "lr": 0.01},
    "scheduler": {"policy": "uniform", "num_microbatches": 2, "max_microbatches": 4},
}


def service_workspace(data_dir: Path) -> Workspace:
    """A service's workspace (files from ``data_dir``, the test policies registered, no memory limit)."""
    return Workspace.service(
        data_dir, PolicyRegistry(TEST_POLICIES), max_file_bytes=2**20, memory_limit_bytes=None
    )


def tiny_config(**sections: Any) -> dict[str, Any]:
    """The tiny config with ``sections`` merged in (dicts update their section, values replace)."""
    data = copy.deepcopy(TINY_CONFIG)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def insert_run(factory: Any, config: dict[str, Any] | None = None, **fields: Any) -> int:
    """A queued run row for ``config`` (default the tiny config); returns its id."""
    from backend.db.models import Run
    from collapipe_core.config import ExperimentConfig

    config = config or tiny_config()
    typed = ExperimentConfig.model_validate(config)  # its fields only: a run may fail its checks later
    values: dict[str, Any] = {
        "name": config.get("name", "run"),
        "config": config,
        "status": "queued",
        "total_rounds": typed.training.rounds,
        "policy": typed.scheduler.policy,
        "executor": typed.executor,
        "V": typed.scheduler.V,
        "num_clusters": typed.network.num_clusters,
        "devices_per_cluster": typed.network.devices_per_cluster,
    }
    values.update(fields)
    with factory() as session:
        run = Run(**values)
        session.add(run)
        session.commit()
        return int(run.id)


def stored_records(factory: Any, run_id: int) -> list[dict[str, Any]]:
    """The run's round records in round order, without wall-clock fields (solve_time_s)."""
    from sqlalchemy import select

    from backend.db.models import RoundMetric

    with factory() as session:
        records = session.scalars(
            select(RoundMetric.record).where(RoundMetric.run_id == run_id).order_by(RoundMetric.round)
        ).all()
    return [{k: v for k, v in r.items() if k != "solve_time_s"} for r in records]


def stored_events(factory: Any, run_id: int) -> list[tuple[str, dict[str, Any]]]:
    """(kind, data) of the run's live events in the outbox, in order (of their positions: SSE ids)."""
    from sqlalchemy import select

    from backend.db.models import RunEvent

    with factory() as session:
        query = select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.position)
        rows = session.scalars(query)
        return [(e.kind, e.data) for e in rows]


def event_summary(factory: Any, run_id: int) -> list[tuple[str, Any]]:
    """(kind, status or round index) of the run's live events, in order."""
    return [
        (kind, data["status"] if kind == "status" else data["round"]["round"])
        for kind, data in stored_events(factory, run_id)
    ]
