"""Series of a run's rounds and devices (filtered, downsampled) and its decision log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from backend.db.models import ROUND_METRIC_COLUMNS
from backend.errors import InvalidInput
from backend.jsonsafe import finite, sanitize
from backend.metrics import repository as repo
from backend.metrics.downsample import Method, downsample
from backend.metrics.fields import DEFAULT_ROUND_FIELDS, DEVICE_FIELDS, RECORD_FIELDS, ROUND_FIELDS, unit_of
from backend.metrics.schemas import DecisionItem, DecisionPage, DeviceSeries, RoundSeries, Series
from backend.runs import service as runs


def _series(points: list[tuple[float, float | None]], max_points: int, method: Method) -> Series:
    kept = [(x, y) for x, y in points if y is not None and finite(y) is not None]
    x = np.array([p[0] for p in kept], dtype=np.float64)
    y = np.array([p[1] for p in kept], dtype=np.float64)
    x, y = downsample(x, y, max_points, method)
    return Series(round=x.tolist(), value=y.tolist())


def _check_fields(fields: Sequence[str], allowed: Sequence[str], name: str) -> None:
    unknown = [f for f in fields if f not in allowed]
    if unknown:
        raise InvalidInput(
            f"unknown {name}: {', '.join(unknown)}; choose from {', '.join(allowed)}",
            [{"field": name, "value": f, "message": "unknown"} for f in unknown],
        )


def round_series(
    session: Session,
    run_id: int,
    fields: Sequence[str],
    from_round: int | None,
    to_round: int | None,
    max_points: int,
    method: Method,
) -> RoundSeries:
    runs.get(session, run_id)
    fields = list(dict.fromkeys(fields or DEFAULT_ROUND_FIELDS))
    _check_fields(fields, ROUND_FIELDS, "fields")
    columns = [f for f in fields if f in ROUND_METRIC_COLUMNS]
    needs_record = any(f in RECORD_FIELDS for f in fields)
    rows = repo.round_columns(
        session, run_id, [*columns, *(["record"] if needs_record else [])], from_round, to_round
    )
    series = {}
    for field in fields:
        if field in ROUND_METRIC_COLUMNS:
            i = 1 + columns.index(field)
            points = [(float(row[0]), row[i]) for row in rows]
        else:
            extract = RECORD_FIELDS[field]
            points = [(float(row[0]), extract(row[-1])) for row in rows]
        series[field] = _series(points, max_points, method)
    return RoundSeries(
        run_id=run_id,
        points_stored=len(rows),
        method=method,
        max_points=max_points,
        series=series,
        units={f: unit_of(f) for f in fields},
    )


def device_series(
    session: Session,
    run_id: int,
    metric: str,
    device_ids: Sequence[str],
    cluster: int | None,
    from_round: int | None,
    to_round: int | None,
    max_points: int,
    method: Method,
) -> DeviceSeries:
    runs.get(session, run_id)
    _check_fields([metric], DEVICE_FIELDS, "metric")
    grouped: dict[str, list[tuple[float, float | None]]] = {}
    for device, round_index, value in repo.device_values(
        session, run_id, metric, device_ids, cluster, from_round, to_round
    ):
        grouped.setdefault(device, []).append((float(round_index), value))
    return DeviceSeries(
        run_id=run_id,
        metric=metric,
        unit=unit_of(metric),
        method=method,
        max_points=max_points,
        series={device: _series(points, max_points, method) for device, points in grouped.items()},
    )


def decisions(
    session: Session, run_id: int, from_round: int | None, to_round: int | None, limit: int, offset: int
) -> DecisionPage:
    runs.get(session, run_id)
    records = repo.records_page(session, run_id, from_round, to_round, limit, offset)
    return DecisionPage(
        run_id=run_id,
        items=[_decision(sanitize(r)) for r in records],
        total=repo.count_rounds(session, run_id, from_round, to_round),
        limit=limit,
        offset=offset,
    )


def _decision(record: dict[str, Any]) -> DecisionItem:
    return DecisionItem(
        round=record["round"],
        policy=record["policy"],
        objective=record.get("objective"),
        feasible=record["feasible"],
        violations=list(record.get("violations", [])),
        solver_iterations=int(record.get("solver_iterations", 0)),
        solve_time_s=record.get("solve_time_s"),
        num_microbatches=list(record.get("num_microbatches", [])),
        decision=record.get("decision", {}),
        measured=record.get("measured") or {},
    )
