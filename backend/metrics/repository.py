"""SQL that reads a run's stored metrics (writing is ingest_repository.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, func, select, tuple_
from sqlalchemy.orm import Session

from backend.db.models import DeviceMetric, RoundMetric, Run


def _round_range(
    query: Select[Any], from_round: int | None, to_round: int | None, column: Any
) -> Select[Any]:
    if from_round is not None:
        query = query.where(column >= from_round)
    if to_round is not None:
        query = query.where(column <= to_round)
    return query


def round_columns(
    session: Session, run_id: int, columns: Sequence[str], from_round: int | None, to_round: int | None
) -> list[tuple[Any, ...]]:
    """(round, *columns) per stored round, in round order; ``record`` may be one of the columns."""
    selected = [RoundMetric.round, *(getattr(RoundMetric, c) for c in columns)]
    query = _round_range(
        select(*selected).where(RoundMetric.run_id == run_id), from_round, to_round, RoundMetric.round
    )
    # Core execution on the session's connection: plain rows, without the ORM's per-row bookkeeping
    return list(session.connection().execute(query.order_by(RoundMetric.round)).all())


def device_columns(
    session: Session,
    run_id: int,
    columns: Sequence[str],
    device_ids: Sequence[str],
    cluster: int | None,
    from_round: int | None,
    to_round: int | None,
) -> list[tuple[Any, ...]]:
    """(device_id, round, *columns) per stored device row, ordered by device then round."""
    selected = [DeviceMetric.device_id, DeviceMetric.round, *(getattr(DeviceMetric, c) for c in columns)]
    query = select(*selected).where(DeviceMetric.run_id == run_id)
    if device_ids:
        query = query.where(DeviceMetric.device_id.in_(device_ids))
    if cluster is not None:
        query = query.where(DeviceMetric.cluster == cluster)
    query = _round_range(query, from_round, to_round, DeviceMetric.round)
    rows = session.connection().execute(query.order_by(DeviceMetric.device_id, DeviceMetric.round))
    return [tuple(row) for row in rows]


def count_rounds(session: Session, run_id: int, from_round: int | None, to_round: int | None) -> int:
    query = select(func.count()).select_from(RoundMetric).where(RoundMetric.run_id == run_id)
    return int(session.scalar(_round_range(query, from_round, to_round, RoundMetric.round)) or 0)


def records_page(
    session: Session, run_id: int, from_round: int | None, to_round: int | None, limit: int, offset: int
) -> list[dict[str, Any]]:
    query = select(RoundMetric.record).where(RoundMetric.run_id == run_id)
    query = _round_range(query, from_round, to_round, RoundMetric.round)
    return list(session.scalars(query.order_by(RoundMetric.round).limit(limit).offset(offset)))


def round_record(session: Session, run_id: int, round_index: int) -> dict[str, Any] | None:
    query = select(RoundMetric.record).where(RoundMetric.run_id == run_id, RoundMetric.round == round_index)
    record: dict[str, Any] | None = session.scalar(query)
    return record


def device_rows(session: Session, run_id: int, round_index: int | None = None) -> list[DeviceMetric]:
    query = select(DeviceMetric).where(DeviceMetric.run_id == run_id)
    if round_index is not None:
        query = query.where(DeviceMetric.round == round_index)
    return list(
        session.scalars(query.order_by(DeviceMetric.round, DeviceMetric.cluster, DeviceMetric.device))
    )


def device_rows_after(
    session: Session, run_id: int, after: tuple[int, int, int] | None, limit: int
) -> list[DeviceMetric]:
    """Up to ``limit`` device rows of the run in (round, cluster, device) order, after the key
    ``after`` (None: from the first): a batch of an export that reads the table a batch at a time."""
    query = select(DeviceMetric).where(DeviceMetric.run_id == run_id)
    if after is not None:
        key = tuple_(DeviceMetric.round, DeviceMetric.cluster, DeviceMetric.device)
        query = query.where(key > tuple_(*after))
    order = (DeviceMetric.round, DeviceMetric.cluster, DeviceMetric.device)
    return list(session.scalars(query.order_by(*order).limit(limit)))


def all_records(session: Session, run_id: int) -> list[dict[str, Any]]:
    query = select(RoundMetric.record).where(RoundMetric.run_id == run_id).order_by(RoundMetric.round)
    return list(session.scalars(query))


def device_summary(session: Session, run_id: int) -> tuple[float | None, float | None]:
    """(peak modeled memory over devices and rounds, mean of energy / budget over devices and rounds)."""
    query = select(
        func.max(DeviceMetric.memory_bytes), func.avg(DeviceMetric.energy_j / DeviceMetric.energy_budget_j)
    ).where(DeviceMetric.run_id == run_id)
    peak, ratio = session.execute(query).one()
    return (None if peak is None else float(peak), None if ratio is None else float(ratio))


def mean_latency(session: Session, run_id: int) -> float | None:
    value = session.scalar(select(func.avg(RoundMetric.latency_s)).where(RoundMetric.run_id == run_id))
    return None if value is None else float(value)


def rounds_stored_since(session: Session, since: datetime) -> int:
    query = select(func.count()).select_from(RoundMetric).where(RoundMetric.created_at >= since)
    return int(session.scalar(query) or 0)


def round_devices_page(
    session: Session, run_id: int, round_index: int, limit: int, offset: int
) -> tuple[int, list[dict[str, Any]]] | None:
    """(how many devices round ``round_index`` has, ``limit`` of their records from ``offset``, in
    cluster then device order, each as ``DeviceRecord.to_json()``); None when the round is not stored."""
    record = round_record(session, run_id, round_index)
    if record is None:
        return None
    where = (DeviceMetric.run_id == run_id, DeviceMetric.round == round_index)
    total = int(session.scalar(select(func.count()).select_from(DeviceMetric).where(*where)) or 0)
    rows = session.scalars(
        select(DeviceMetric)
        .where(*where)
        .order_by(DeviceMetric.cluster, DeviceMetric.device)
        .limit(limit)
        .offset(offset)
    )
    measured = record.get("measured") or {}
    return total, [{**_device_json(row), "measured": dict(measured.get(row.device_id, {}))} for row in rows]


def _device_json(row: DeviceMetric) -> dict[str, Any]:
    """A device row as ``DeviceRecord.to_json()`` (field order and names of the core's record)."""
    return {
        "round": row.round,
        "cluster": row.cluster,
        "device": row.device,
        "device_id": row.device_id,
        "profile": row.profile,
        "num_blocks": row.num_blocks,
        "block_start": row.block_start,
        "block_end": row.block_end,
        "bandwidth_share": row.bandwidth_share,
        "power_w": row.power_w,
        "rate_bps": row.rate_bps,
        "compute_s": row.compute_s,
        "comm_s": row.comm_s,
        "idle_s": row.idle_s,
        "energy_j": row.energy_j,
        "queue": row.queue,
        "memory_bytes": row.memory_bytes,
        "memory_capacity_bytes": row.memory_capacity_bytes,
        "energy_budget_j": row.energy_budget_j,
        "available": row.available,
    }


def _watermark_query(from_round: bool, to_round: bool) -> Select[Any]:
    created = select(Run.created_at).where(Run.id == bindparam("run_id")).scalar_subquery()
    aggregates: list[Any] = [func.count(RoundMetric.id), func.max(RoundMetric.id), created]
    query = select(*aggregates).where(RoundMetric.run_id == bindparam("run_id"))
    if from_round:
        query = query.where(RoundMetric.round >= bindparam("from_round"))
    if to_round:
        query = query.where(RoundMetric.round <= bindparam("to_round"))
    return query


# built once per shape of range (asked on every series request, so kept off the statement builder)
_WATERMARK_QUERIES = {(f, t): _watermark_query(f, t) for f in (False, True) for t in (False, True)}


def round_watermark(
    session: Session, run_id: int, from_round: int | None, to_round: int | None
) -> tuple[int, int | None, datetime | None]:
    """What identifies the stored rounds of a run in a range: their number, their largest row id
    (rows are only inserted, each with a new id) and the run's creation time (a run id that SQLite
    reuses after a deletion belongs to another run)."""
    query = _WATERMARK_QUERIES[from_round is not None, to_round is not None]
    params = {"run_id": run_id}
    if from_round is not None:
        params["from_round"] = from_round
    if to_round is not None:
        params["to_round"] = to_round
    count, max_id, created_at = session.connection().execute(query, params).one()
    return int(count), max_id, created_at
