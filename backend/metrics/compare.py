"""Several runs side by side, each figure also as a ratio to a chosen baseline run; with a target eval
loss, each run's modeled time (and rounds) to reach it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.db.models import Run
from backend.errors import InvalidInput, NotFound
from backend.jsonsafe import finite
from backend.metrics import repository as repo
from backend.metrics.schemas import CompareOut, CompareRow
from backend.runs import repository as runs_repo
from collapipe_core.metrics import time_to_target

FIGURES = (
    "mean_latency_s",
    "efficiency",
    "peak_memory_bytes",
    "mean_energy_budget_ratio",
    "time_to_target_s",
)


def _final_eval(records: list[dict[str, Any]]) -> dict[str, float]:
    for record in reversed(records):
        if record.get("eval_loss") is not None:
            values = {"eval_loss": record["eval_loss"], **(record.get("eval_metrics") or {})}
            return {k: float(v) for k, v in values.items() if v is not None and finite(float(v)) is not None}
    return {}


def _efficiency(records: list[dict[str, Any]]) -> float | None:
    fractions = [
        sum(r["bubble_fraction"]) / len(r["bubble_fraction"]) for r in records if r.get("bubble_fraction")
    ]
    return finite(1.0 - sum(fractions) / len(fractions)) if fractions else None


def _to_target(session: Session, run_id: int, target: float | None) -> tuple[float, int] | None:
    """Modeled time and rounds to ``target`` over the run's stored rounds (None: no target, or never
    reached); the stored columns, as the round series' elapsed_s sums them."""
    if target is None:
        return None
    rows = repo.round_columns(session, run_id, ["latency_s", "eval_loss"], None, None)
    return time_to_target([row[1] for row in rows], [row[2] for row in rows], target)


def _row(session: Session, run: Run, target: float | None) -> CompareRow:
    records = repo.all_records(session, run.id)
    peak, energy_ratio = repo.device_summary(session, run.id)
    reached = _to_target(session, run.id, target)
    return CompareRow(
        run_id=run.id,
        name=run.name,
        policy=run.policy,
        rounds_done=run.rounds_done,
        mean_latency_s=finite(repo.mean_latency(session, run.id)),
        efficiency=_efficiency(records),
        peak_memory_bytes=finite(peak),
        mean_energy_budget_ratio=finite(energy_ratio),
        final_eval=_final_eval(records),
        time_to_target_s=finite(reached[0]) if reached else None,
        rounds_to_target=reached[1] if reached else None,
        ratios={},
    )


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return finite(value / base)


def compare(
    session: Session, run_ids: Sequence[int], baseline: int | None, target_eval_loss: float | None = None
) -> CompareOut:
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        raise InvalidInput(
            "give at least one run id", [{"field": "run_ids", "value": None, "message": "empty"}]
        )
    baseline_id = ids[0] if baseline is None else baseline
    if baseline_id not in ids:
        ids.insert(0, baseline_id)
    found = {run.id: run for run in runs_repo.get_many(session, ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"no run with id {', '.join(map(str, missing))}")
    rows = [_row(session, found[i], target_eval_loss) for i in ids]
    base = next(r for r in rows if r.run_id == baseline_id)
    for row in rows:
        row.ratios = {f: _ratio(getattr(row, f), getattr(base, f)) for f in FIGURES}
        row.ratios.update(
            {f"final_{k}": _ratio(v, base.final_eval.get(k)) for k, v in row.final_eval.items()}
        )
    return CompareOut(baseline_run_id=baseline_id, target_eval_loss=target_eval_loss, runs=rows)
