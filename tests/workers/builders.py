"""Run rows for the workers' tests, written straight to the database."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.db.models import Run
from tests.core.builders import tiny_config


def config_json(rounds: int = 4, executor: str = "analytic") -> dict[str, Any]:
    config = tiny_config(executor=executor, training={"rounds": rounds})
    data: dict[str, Any] = json.loads(config.model_dump_json(by_alias=True))
    return data


def add_run(
    factory: sessionmaker[Session],
    status: str = "queued",
    rounds: int = 4,
    lease_owner: str | None = None,
    lease_in_s: float | None = None,
    **values: Any,
) -> int:
    """Insert a run (``lease_in_s`` < 0: a lease that expired that long ago); returns its id."""
    config = config_json(rounds)
    run = Run(
        name="test",
        config=config,
        status=status,
        total_rounds=rounds,
        policy=config["scheduler"]["policy"],
        executor=config["executor"],
        V=config["scheduler"].get("V", 1.0),
        num_clusters=config["network"]["num_clusters"],
        devices_per_cluster=config["network"]["devices_per_cluster"],
        lease_owner=lease_owner,
        lease_expires_at=None if lease_in_s is None else utcnow() + timedelta(seconds=lease_in_s),
        **values,
    )
    with factory() as session:
        session.add(run)
        session.commit()
        return run.id


def get_run(factory: sessionmaker[Session], run_id: int) -> Run:
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run
