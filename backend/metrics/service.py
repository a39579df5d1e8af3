"""Series of a run's rounds and devices (filtered, downsampled) and its decision log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, get_args

import numpy as np
from sqlalchemy.orm import Session

from backend.db.models import ROUND_METRIC_COLUMNS, Run
from backend.errors import InvalidInput, NotFound
from backend.jsonsafe import sanitize
from backend.metrics import repository as repo
from backend.metrics.downsample import MAX_POINTS, MIN_POINTS, Floats, Method, downsample
from backend.metrics.fields import DEFAULT_ROUND_FIELDS, DEVICE_FIELDS, RECORD_FIELDS, ROUND_FIELDS, unit_of
from backend.metrics.schemas import (
    DecisionItem,
    DecisionPage,
    DeviceMetricSeries,
    DeviceSeries,
    RoundDevicesPage,
    RoundSeries,
    Series,
)
from backend.metrics.series_cache import SeriesCache
from backend.runs import service as runs
from collapipe_core.network import device_id


def _series(
    rounds: Sequence[float] | Floats,
    values: Sequence[float | None] | Floats,
    elapsed: Floats,
    max_points: int,
    method: Method,
) -> Series:
    """Drop missing and non-finite values (None becomes NaN), downsample, return the lists."""
    x = np.asarray(rounds, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    valid = np.isfinite(y)
    x, y, t = downsample(x[valid], y[valid], max_points, method, elapsed[valid])
    return Series(round=x.tolist(), value=y.tolist(), elapsed_s=t.tolist())


def _elapsed(latencies: Sequence[float]) -> Floats:
    """Modeled elapsed time at the end of each round: the running sum of the rounds' modeled latency
    T (``latency_s``) from the run's first round."""
    return np.cumsum(np.asarray(latencies, dtype=np.float64))


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
    columns = ["latency_s", *(f for f in fields if f in ROUND_METRIC_COLUMNS and f != "latency_s")]
    needs_record = any(f in RECORD_FIELDS for f in fields)
    # from the first round: the elapsed time of a round counts every round before it
    rows = repo.round_columns(
        session, run_id, [*columns, *(["record"] if needs_record else [])], None, to_round
    )
    elapsed = _elapsed([row[1] for row in rows])
    if from_round is not None:
        start = next((i for i, row in enumerate(rows) if row[0] >= from_round), len(rows))
        rows, elapsed = rows[start:], elapsed[start:]
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
        series[field] = _series(rounds, values, elapsed, max_points, method)
    return RoundSeries(
        run_id=run_id,
        points_stored=len(rows),
        method=method,
        max_points=max_points,
        series=series,
        units={f: unit_of(f) for f in fields},
        last_round=rows[-1][0] if rows else None,
        elapsed_s=float(elapsed[-1]) if rows else 0.0,
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


@dataclass(frozen=True)
class DeviceMetricQuery:
    """A metric asked of the device series, and how each device's series of it is downsampled."""

    name: str
    max_points: int
    method: Method
    every_device: bool = False  # whatever devices the request selects


METHODS: tuple[Method, ...] = get_args(Method)
METRIC_SPEC = "NAME, NAME:MAX_POINTS or NAME:MAX_POINTS:METHOD"


def device_metric_queries(
    specs: Sequence[str], max_points: int, method: Method, all_devices: Sequence[str] = ()
) -> list[DeviceMetricQuery]:
    """Parse ``metric`` parameters (``METRIC_SPEC``; what a spec leaves out is ``max_points`` and
    ``method``) and ``all_devices`` (names among them); InvalidInput naming every bad one."""
    queries: list[DeviceMetricQuery] = []
    problems: list[dict[str, Any]] = []
    for spec in specs:
        name, _, options = spec.partition(":")
        points_text, _, method_text = options.partition(":")
        if name not in DEVICE_FIELDS:
            problems.append({"field": "metric", "value": spec, "message": f"unknown metric {name!r}"})
        elif any(q.name == name for q in queries):
            problems.append({"field": "metric", "value": spec, "message": f"{name} asked more than once"})
        elif points_text and not (points_text.isdigit() and MIN_POINTS <= int(points_text) <= MAX_POINTS):
            message = f"max_points must be a whole number from {MIN_POINTS} to {MAX_POINTS}"
            problems.append({"field": "metric", "value": spec, "message": message})
        elif method_text and method_text not in METHODS:
            message = f"method must be one of {', '.join(METHODS)}"
            problems.append({"field": "metric", "value": spec, "message": message})
        else:
            chosen = method_text if method_text else method
            points = int(points_text) if points_text else max_points
            queries.append(DeviceMetricQuery(name, points, chosen, name in all_devices))
    asked = {q.name for q in queries}
    for name in all_devices:
        if name not in asked:
            message = "not one of the metrics asked (metric)"
            problems.append({"field": "all_devices", "value": name, "message": message})
    if problems:
        raise InvalidInput(
            f"give each metric as {METRIC_SPEC}, NAME one of {', '.join(DEVICE_FIELDS)}; "
            + "; ".join(f"{p['field']} {p['value']!r}: {p['message']}" for p in problems),
            problems,
        )
    return queries


MAX_DEVICE_ROWS = 2_000_000
"""Stored device rows (devices x rounds) one request of device series may read: a run's size must not
turn a viewer's request into gigabytes of memory; larger asks page through the devices or rounds."""


def _rows_to_read(run: Run, devices: int, from_round: int | None, to_round: int | None) -> int:
    stored: int = run.rounds_done
    last = min(stored - 1, to_round if to_round is not None else stored - 1)
    return devices * max(0, last - (from_round or 0) + 1)


def _page_of_devices(
    run: Any, device_ids: Sequence[str], cluster: int | None, limit: int, offset: int
) -> list[str]:
    """The devices a request selects, in cluster then device order: ``device_ids`` (or, without
    them, every device of ``cluster`` or of the run), then the page ``offset``, ``limit`` of those."""
    if device_ids:
        chosen = list(device_ids)
    else:
        clusters = [cluster] if cluster is not None else range(run.num_clusters)
        chosen = [device_id(n, k) for n in clusters for k in range(run.devices_per_cluster)]
    return chosen[offset : offset + limit]


def device_series(
    session: Session,
    run_id: int,
    metrics: Sequence[DeviceMetricQuery],
    device_ids: Sequence[str],
    cluster: int | None,
    from_round: int | None,
    to_round: int | None,
    limit: int | None = None,
    offset: int = 0,
) -> DeviceSeries:
    """Each metric's series per device, downsampled per metric: the devices ``device_ids`` and
    ``cluster`` select (default all), a page of them with ``limit`` and ``offset``; every device of
    that page for a metric asked ``every_device``. One query per group of metrics. InvalidInput when
    more than ``MAX_DEVICE_ROWS`` stored rows would be read."""
    run = runs.get(session, run_id)
    total = run.num_clusters * run.devices_per_cluster
    paged = limit is not None or offset > 0
    if paged:
        device_ids = _page_of_devices(run, device_ids, cluster, limit or total, offset)
        cluster = None
        if not device_ids:  # past the last device
            return DeviceSeries(run_id=run_id, metrics={}, devices_total=total)
    selected = len(device_ids) if device_ids else (run.devices_per_cluster if cluster is not None else total)
    widest = total if any(m.every_device for m in metrics) and not paged else selected
    to_read = _rows_to_read(run, widest, from_round, to_round)
    if to_read > MAX_DEVICE_ROWS:
        message = (
            f"this would read {to_read} stored device rows, more than {MAX_DEVICE_ROWS}: ask fewer devices "
            "(a page of them: limit and offset; or device_id, cluster) or fewer rounds (from, to)"
        )
        raise InvalidInput(message, [{"field": "limit", "value": limit, "message": message}])
    filtered = bool(device_ids) or cluster is not None
    groups = [
        [m for m in metrics if not m.every_device or paged],
        [m for m in metrics if m.every_device and not paged],
    ]
    result: dict[str, DeviceMetricSeries] = {}
    latencies: list[tuple[Any, ...]] | None = None
    for group, selected in zip(groups, (filtered, False), strict=True):
        if not group:
            continue
        rows = repo.device_columns(
            session,
            run_id,
            [m.name for m in group],
            device_ids if selected else [],
            cluster if selected else None,
            from_round,
            to_round,
        )
        if rows and latencies is None:
            # read after the device rows: every round they hold is in it (rounds are only added)
            latencies = repo.round_columns(session, run_id, ["latency_s"], None, to_round)
        result.update(_device_metric_series(rows, group, latencies or []))
    return DeviceSeries(run_id=run_id, metrics={m.name: result[m.name] for m in metrics}, devices_total=total)


def _device_metric_series(
    rows: Sequence[tuple[Any, ...]],
    metrics: Sequence[DeviceMetricQuery],
    latencies: Sequence[tuple[Any, ...]],
) -> dict[str, DeviceMetricSeries]:
    """``rows`` of (device_id, round, *metrics), ordered by device then round, as downsampled series;
    ``latencies``: (round, latency_s) of the run's rounds from the first, for the elapsed time."""
    devices = [row[0] for row in rows]
    rounds = np.fromiter((row[1] for row in rows), dtype=np.float64, count=len(rows))
    stored = np.fromiter((row[0] for row in latencies), dtype=np.float64, count=len(latencies))
    at = np.clip(np.searchsorted(stored, rounds), 0, max(len(stored) - 1, 0))
    elapsed = _elapsed([row[1] for row in latencies])[at] if len(stored) else np.zeros_like(rounds)
    # each device's rows are one slice
    bounds = [i for i in range(len(devices)) if i == 0 or devices[i] != devices[i - 1]] + [len(devices)]
    slices = [(devices[a], a, b) for a, b in pairwise(bounds)]
    result = {}
    for i, metric in enumerate(metrics):
        values = np.array([row[2 + i] for row in rows], dtype=np.float64)  # None becomes NaN
        result[metric.name] = DeviceMetricSeries(
            unit=unit_of(metric.name),
            method=metric.method,
            max_points=metric.max_points,
            series={
                device: _series(rounds[a:b], values[a:b], elapsed[a:b], metric.max_points, metric.method)
                for device, a, b in slices
            },
        )
    return result


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


def round_devices(
    session: Session, run_id: int, round_index: int, limit: int, offset: int
) -> RoundDevicesPage:
    """A page of round ``round_index``'s device records (NotFound for a run or round not stored)."""
    page = repo.round_devices_page(session, run_id, round_index, limit, offset)
    if page is None:
        run = runs.get(session, run_id)
        raise NotFound(f"run {run_id} has no stored round {round_index} (it has {run.rounds_done} rounds)")
    total, items = page
    items = [sanitize(item) for item in items]
    return RoundDevicesPage(
        run_id=run_id, round=round_index, items=items, total=total, limit=limit, offset=offset
    )


def _decision(record: dict[str, Any]) -> DecisionItem:
    return DecisionItem(
        round=record["round"],
        policy=record["policy"],
        objective=record.get("objective"),
        objective_latency=record.get("objective_latency"),
        objective_convergence=record.get("objective_convergence"),
        objective_energy=record.get("objective_energy"),
        feasible=record["feasible"],
        violations=list(record.get("violations", [])),
        solver_iterations=int(record.get("solver_iterations", 0)),
        solve_time_s=record.get("solve_time_s"),
        num_microbatches=list(record.get("num_microbatches", [])),
        blocks_moved=record.get("blocks_moved"),
        redistribution_s=list(record.get("redistribution_s") or []),
        moves_latency_share=record.get("moves_latency_share"),
        decision=record.get("decision", {}),
        measured=record.get("measured") or {},
        explanation=record.get("explanation") or {},
    )
