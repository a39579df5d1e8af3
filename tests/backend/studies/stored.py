"""A study stored as its finished runs leave it (the study row, its runs, their round rows), without
running anything: for tests of what the page and the report draw from a study's stored rows (the
figures themselves are checked against real runs in test_router.py and test_presets.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import RoundMetric, Run, Study
from backend.runtime.repository import copy_latest_figures
from backend.studies import grid
from backend.studies.grid import Axis, Cell

Figure = Callable[[Cell, int, int], float]  # (cell, seed, round) -> a round's value


def store_study(
    factory: sessionmaker[Session],
    owner_id: int,
    name: str,
    bases: Mapping[str, dict[str, Any]],
    axes: Sequence[Axis],
    latency_s: Figure,
    eval_loss: Figure | None = None,
    baseline: dict[str, Any] | None = None,
) -> int:
    """Store the study of ``bases`` (name → config) × ``axes`` (grid), every run succeeded with
    ``training.rounds`` rounds of ``latency_s`` (and ``eval_loss``); its id."""
    plan = grid.expand(list(bases), axes, "grid")
    configs = list(bases.values())
    with factory() as session:
        study = Study(
            name=name,
            owner_id=owner_id,
            definition={
                "bases": [{"name": n, "experiment_id": None, "config": c} for n, c in bases.items()],
                "axes": [{"field": a.field, "values": list(a.values)} for a in axes],
                "mode": "grid",
                "concurrency": 4,
                "baseline": baseline,
            },
            cells=[c.to_json() for c in plan.cells],
            concurrency=4,
        )
        session.add(study)
        session.flush()
        labels = grid.cell_labels(plan.cells)
        for planned in plan.runs:
            config = grid.run_config(configs[planned.base], planned.values)
            cell, seed, rounds = plan.cells[planned.cell], int(config["seed"]), config["training"]["rounds"]
            run = Run(
                name=f"{name} · {labels[cell.index]} · seed {seed}",
                config=config,
                status="succeeded",
                owner_id=owner_id,
                rounds_done=rounds,
                total_rounds=rounds,
                policy=config["scheduler"]["policy"],
                executor=config["executor"],
                V=float(config["scheduler"].get("V", 1.0)),
                num_clusters=config["network"]["num_clusters"],
                devices_per_cluster=config["network"]["devices_per_cluster"],
                study_id=study.id,
                study_cell=cell.index,
            )
            session.add(run)
            session.flush()
            for r in range(rounds):
                loss = None if eval_loss is None else eval_loss(cell, seed, r)
                record = {"round": r, "num_microbatches": [2] * run.num_clusters, "eval_metrics": {}}
                session.add(
                    RoundMetric(
                        run_id=run.id,
                        round=r,
                        record=record,
                        latency_s=latency_s(cell, seed, r),
                        objective=0.0,
                        eval_loss=loss,
                    )
                )
                session.flush()
                copy_latest_figures(session, run.id, r)  # as storing the round does
        session.commit()
        return study.id
