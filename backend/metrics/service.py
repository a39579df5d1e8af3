"""Series of a run's rounds and devices (filtered, downsampled) and its decision log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from backend.db.models import ROUND_METRIC_COLUMNS
from backend.errors import InvalidInput
from backend.jsonsafe import sanitize
from backend.metrics import repository as repo
from backend.metrics.downsample import Method, downsample
from backend.metrics.fields import DEFAULT_ROUND_FIELDS, DEVICE_FIELDS, RECORD_FIELDS, ROUND_FIELDS, unit_of
from backend.metrics.schemas import DecisionItem, DecisionPage, DeviceSeries, RoundSeries, Series
from backend.metrics.series_cache import SeriesCache
from backend.runs import service as runs


def _series(
    rounds: Sequence[float], values: Sequence[float | None], max_points: int, method: Method
) -> Series:
    """Drop missing and non-finite values (None becomes NaN), downsample, return the lists."""
    x = np.asarray(rounds, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    valid = np.isfinite(y)
    x, y = downsample(x[valid], y[valid], max_points, method)
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
    fields = list(dict.fromkeys(fields or DEFAULT_ROUND_FIELDS))
    _check_fields(fields, ROUND_FIELDS, "fields")
    columns = [f for f in fields if f in ROUND_METRIC_COLUMNS]
    needs_record = any(f in RECORD_FIELDS for f in fields)
    rows = repo.round_columns(
        session, run_id, [*columns, *(["record"] if needs_record else [])], from_round, to_round
    )
    if not rows:  # no rounds in range, or no such run (asked only then: one query per request)
        runs.ensure_exists(session, run_id)
    rounds = [row[0] for row in rows]
    series = {}
    for field in fields:
        if field in ROUND_METRIC_COLUMNS:
            i = 1 + columns.index(field)
            values = [row[i] for row in rows]
        else:
            extract = RECORD_FIELDS[field]
            values = [extract(row[-1]) for row in rows]
        series[field] = _series(rounds, values, max_points, method)
    return RoundSeries(
        run_id=run_id,
        points_stored=len(rows),
        method=method,
        max_points=max_points,
        series=series,
        units={f: unit_of(f) for f in fields},
    )


def round_series_body(
    session: Session,
    cache: SeriesCache,
    run_id: int,
    fields: Sequence[str],
    from_round: int | None,
    to_round: int | None,
    max_points: int,
    method: Method,
) -> bytes:
    """``round_series`` as its JSON body, from ``cache`` while the run's rounds in range are unchanged."""
    key = (run_id, tuple(fields), from_round, to_round, max_points, method)
    watermark = repo.round_watermark(session, run_id, from_round, to_round)
    if watermark[0] > 0:  # nothing stored (or no such run): computed below, never cached
        body = cache.get(key, watermark)
        if body is not None:
            return body
    series = round_series(session, run_id, fields, from_round, to_round, max_points, method)
    body = series.model_dump_json().encode()
    # kept only if no round arrived while the series was read: the body then matches the watermark
    if watermark[0] > 0 and repo.round_watermark(session, run_id, from_round, to_round) == watermark:
        cache.put(key, watermark, body)
    return body


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
    runs.ensure_exists(session, run_id)
    _check_fields([metric], DEVICE_FIELDS, "metric")
    grouped: dict[str, tuple[list[int], list[float | None]]] = {}
    for device, round_index, value in repo.device_values(
        session, run_id, metric, device_ids, cluster, from_round, to_round
    ):
        rounds, values = grouped.setdefault(device, ([], []))
        rounds.append(round_index)
        values.append(value)
    return DeviceSeries(
        run_id=run_id,
        metric=metric,
        unit=unit_of(metric),
        method=method,
        max_points=max_points,
        series={device: _series(r, v, max_points, method) for device, (r, v) in grouped.items()},
    )


def decisions(
    session: Session, run_id: int, from_round: int | None, to_round: int | None, limit: int, offset: int
) -> DecisionPage:
    runs.ensure_exists(session, run_id)
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
