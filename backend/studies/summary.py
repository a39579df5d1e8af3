"""What a study reads as: its progress and status (derived from its runs, never stored), and its cells
with their runs and the mean and Student-t 95 % interval over seeds of every figure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.db.models import TERMINAL_STATUSES, Study
from backend.errors import InvalidInput
from backend.jsonsafe import finite
from backend.studies import figures, grid, regime
from backend.studies import repository as repo
from backend.studies.figure_axes import figure_axes
from backend.studies.grid import Cell
from backend.studies.schemas import (
    MetricSummary,
    RegimeAxes,
    RegimeMap,
    StudyCell,
    StudyCellRun,
    StudyDetail,
    StudyOut,
    StudyProgress,
    StudyStatus,
)
from collapipe_core.config import TrainingConfig
from collapipe_core.intervals import mean_interval


def derive_status(by_status: dict[str, int]) -> StudyStatus:
    """A study's status from its runs' statuses."""
    total = sum(by_status.values())
    queued = by_status.get("queued", 0)
    if by_status.get("running", 0) or (queued and queued < total):
        return "running"
    if queued:
        return "queued"
    if by_status.get("succeeded", 0) == total:
        return "succeeded"
    return "failed" if by_status.get("failed", 0) else "cancelled"


def progress(rows: Iterable[tuple[str, int, int, int]]) -> StudyProgress:
    """From (status, runs, rounds_done, total_rounds) per run status."""
    by_status: Counter[str] = Counter()
    rounds_done = rounds_total = 0
    for status, runs, done, total in rows:
        by_status[status] += int(runs)
        rounds_done += int(done)
        rounds_total += int(total)
    return StudyProgress(
        status=derive_status(by_status),
        runs_total=sum(by_status.values()),
        runs_done=sum(n for s, n in by_status.items() if s in TERMINAL_STATUSES),
        runs_by_status=dict(sorted(by_status.items())),
        rounds_done=rounds_done,
        rounds_total=rounds_total,
    )


def progress_of(session: Session, study_id: int) -> StudyProgress:
    return progress(
        (status, runs, done, total)
        for _, status, runs, done, total in repo.status_counts(session, [study_id])
    )


def _out(study: Study, owner_name: str | None, state: StudyProgress) -> dict[str, Any]:
    return {
        "id": study.id,
        "name": study.name,
        "owner_id": study.owner_id,
        "owner_name": owner_name,
        "created_at": study.created_at,
        "mode": study.definition.get("mode", "grid"),
        "concurrency": study.concurrency,
        "num_cells": len(study.cells),
        "progress": state,
    }


def outs(session: Session, studies: Sequence[Study]) -> list[StudyOut]:
    """The studies with their progress (one grouped query for all of them)."""
    grouped: dict[int, list[tuple[str, int, int, int]]] = {s.id: [] for s in studies}
    for study_id, status, runs, done, total in repo.status_counts(session, list(grouped)):
        grouped[study_id].append((status, runs, done, total))
    names = repo.owner_names(session, {s.owner_id for s in studies if s.owner_id is not None})
    return [
        StudyOut(**_out(s, names.get(s.owner_id) if s.owner_id else None, progress(grouped[s.id])))
        for s in studies
    ]


def _references(study: Study, cells: Sequence[Cell], baseline_cell: int | None) -> list[int | None]:
    if baseline_cell is not None:
        if baseline_cell >= len(cells):
            raise InvalidInput(
                f"the study has cells 0 to {len(cells) - 1}",
                [{"field": "baseline_cell", "value": baseline_cell, "message": "no such cell"}],
            )
        return [baseline_cell] * len(cells)
    baseline = study.definition.get("baseline")
    return grid.reference_cells(cells, baseline) if baseline else [None] * len(cells)


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return finite(value / base)


def _regime_map(
    study: Study, cells: Sequence[Cell], members: dict[int, list[Any]], per_run: dict[int, dict[str, Any]]
) -> RegimeMap | None:
    """The study's regime map, if its definition asks for one."""
    axes = study.definition.get("regime_map")
    if not axes:
        return None
    axis_values = {a["field"]: a["values"] for a in study.definition.get("axes", [])}
    runs = [r for rows in members.values() for r in rows]
    return regime.regime_map(
        RegimeAxes.model_validate(axes),
        axis_values,
        cells,
        {index: [per_run[r.id] for r in rows] for index, rows in members.items()},
        fixed_batch=bool(runs) and all((r[7] or {}).get("batch_size") is not None for r in runs),
    )


def detail(
    session: Session, study: Study, target_eval_loss: float | None, baseline_cell: int | None
) -> StudyDetail:
    head = repo.latest_event_id(session, study.id)  # first: what is read below is at least this new
    runs = repo.runs(session, study.id)
    rows = figures.collect_rows(
        ((r.id, TrainingConfig.model_validate(r[7])) for r in runs),
        repo.rounds(session, study.id),
        repo.device_totals_per_round(session, study.id),
        repo.device_memory_and_backlog(session, study.id),
        repo.device_energy_over_budget(session, study.id),
    )
    per_run = {run_id: figures.run_figures(r, target_eval_loss) for run_id, r in rows.items()}
    metrics = figures.metric_infos(name for f in per_run.values() for name in f)
    cells = [Cell(int(c["index"]), str(c["base"]), dict(c["values"])) for c in study.cells]
    references = _references(study, cells, baseline_cell)
    members: dict[int, list[Any]] = {c.index: [] for c in cells}
    for run in runs:
        members.setdefault(int(run.study_cell), []).append(run)
    summaries = []
    for cell in cells:
        values = {
            m.name: [v for r in members[cell.index] if (v := per_run[r.id].get(m.name)) is not None]
            for m in metrics
        }
        intervals = {name: mean_interval(v) for name, v in values.items()}
        summaries.append(
            {
                name: MetricSummary(mean=i.mean, ci95_low=i.low, ci95_high=i.high, n=i.n)
                for name, i in intervals.items()
            }
        )
    out_cells = []
    labels = grid.cell_labels(cells)
    for cell, label, summary, reference in zip(cells, labels, summaries, references, strict=True):
        base = summaries[reference] if reference is not None else None
        out_cells.append(
            StudyCell(
                index=cell.index,
                base=cell.base,
                values=cell.values,
                label=label,
                runs=[
                    StudyCellRun(
                        id=r.id,
                        seed=int(r[6]),
                        status=r.status,
                        rounds_done=r.rounds_done,
                        total_rounds=r.total_rounds,
                        error=r.error,
                    )
                    for r in members[cell.index]
                ],
                metrics=summary,
                baseline_cell=reference,
                ratios={} if base is None else {n: _ratio(s.mean, base[n].mean) for n, s in summary.items()},
            )
        )
    counts: dict[str, tuple[int, int, int]] = {}
    for r in runs:
        n, done, total = counts.get(r.status, (0, 0, 0))
        counts[r.status] = (n + 1, done + r.rounds_done, total + r.total_rounds)
    state = progress((status, *c) for status, c in counts.items())
    names = repo.owner_names(session, {study.owner_id} if study.owner_id is not None else set())
    trains = any(r.executor != "analytic" for r in runs)
    return StudyDetail(
        **_out(study, names.get(study.owner_id) if study.owner_id else None, state),
        definition=study.definition,
        axes=grid.varying_fields(cells),
        overrides=grid.overrides(cells),
        figure_axes=figure_axes(cells),
        trains=trains,
        series_field="eval_loss" if trains else "latency_s",
        seeds=sorted({int(r[6]) for r in runs}),
        target_eval_loss=target_eval_loss,
        metrics=metrics,
        cells=out_cells,
        regime_map=_regime_map(study, cells, members, per_run),
        last_event_id=head,
    )
