"""A study's round series per cell: the mean over the cell's runs (its seeds) of one round field at
each round every run of the cell has, with the mean modeled elapsed time there, downsampled.

Each run's series is the one ``GET /api/runs/{id}/rounds`` answers (``backend.metrics.service``:
the same fields, values and elapsed time Σ latency_s), read whole; the cell's mean is then
downsampled along the chosen x (round or elapsed time) with ``backend.metrics.downsample``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy.orm import Session

from backend.db.models import Study
from backend.errors import InvalidInput
from backend.metrics import service as metrics
from backend.metrics.downsample import MAX_POINTS, Floats, Method, downsample
from backend.metrics.fields import ROUND_FIELDS, unit_of
from backend.metrics.schemas import Series
from backend.studies import grid
from backend.studies import repository as repo
from backend.studies.grid import Cell
from backend.studies.schemas import CellSeries, SeriesX, StudySeries


def check_field(field: str) -> None:
    if field not in ROUND_FIELDS:
        raise InvalidInput(
            f"unknown field: {field}; choose from {', '.join(ROUND_FIELDS)}",
            [{"field": "field", "value": field, "message": "not a round field"}],
        )


def cell_mean(runs: Sequence[Series]) -> tuple[Floats, Floats, Floats]:
    """(rounds, mean value, mean elapsed_s) at the rounds every one of ``runs`` has a value for, in
    round order; nothing when there are no runs."""
    if not runs:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty, empty
    common = set(runs[0].round).intersection(*(r.round for r in runs[1:]))
    rounds = np.asarray(sorted(common), dtype=np.float64)
    values = np.zeros((len(runs), len(rounds)), dtype=np.float64)
    elapsed = np.zeros_like(values)
    for i, run in enumerate(runs):
        at = {r: j for j, r in enumerate(run.round)}
        kept = [at[r] for r in rounds.tolist()]
        values[i] = np.asarray(run.value, dtype=np.float64)[kept]
        elapsed[i] = np.asarray(run.elapsed_s, dtype=np.float64)[kept]
    return rounds, values.mean(axis=0), elapsed.mean(axis=0)


def study_series(
    session: Session, study: Study, field: str, x: SeriesX, max_points: int, method: Method
) -> StudySeries:
    check_field(field)
    members: dict[int, list[Series]] = {int(c["index"]): [] for c in study.cells}
    for run in repo.runs(session, study.id):
        read = metrics.round_series(session, run.id, [field], None, None, MAX_POINTS, "none")
        members.setdefault(int(run.study_cell), []).append(read.series[field])
    cells = [Cell(int(c["index"]), str(c["base"]), dict(c["values"])) for c in study.cells]
    labels = grid.cell_labels(cells)
    out = []
    for cell, label in zip(cells, labels, strict=True):
        rounds, values, elapsed = cell_mean(members[cell.index])
        num_points = len(rounds)
        if x == "round":
            rounds, values, elapsed = downsample(rounds, values, max_points, method, elapsed)
        else:  # downsampled along the elapsed time: the shape a chart against time shows
            elapsed, values, rounds = downsample(elapsed, values, max_points, method, rounds)
        out.append(
            CellSeries(
                index=cell.index,
                base=cell.base,
                values=cell.values,
                label=label,
                num_runs=len(members[cell.index]),
                num_points=num_points,
                round=rounds.tolist(),
                value=values.tolist(),
                elapsed_s=elapsed.tolist(),
            )
        )
    return StudySeries(
        study_id=study.id,
        field=field,
        unit=unit_of(field),
        x=x,
        method=method,
        max_points=max_points,
        fields=list(ROUND_FIELDS),
        cells=out,
    )
