"""SQL that stores a round's records: idempotent on (run_id, round) and (run_id, round, device_id).

``insert_round`` is insert-or-ignore on both tables (ON CONFLICT DO NOTHING on SQLite and
PostgreSQL), so a round re-run after a crash or a duplicate task delivery adds nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Insert, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from backend.db.models import DEVICE_METRIC_COLUMNS, DeviceMetric, RoundMetric
from backend.jsonsafe import sanitize
from collapipe_core.records import RoundResult


def _insert_ignore(session: Session, table: Table, keys: list[str]) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=keys)
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=keys)
    raise NotImplementedError(f"database dialect {dialect!r}: use SQLite or PostgreSQL")


def round_row(run_id: int, result: RoundResult) -> dict[str, Any]:
    record = sanitize(result.round.to_json())  # JSON columns: NaN/inf become null (PostgreSQL rejects them)
    return {
        "run_id": run_id,
        "round": result.round.round,
        "record": record,
        "latency_s": result.round.latency_s,
        "objective": result.round.objective,
        "train_loss": result.round.train_loss,
        "eval_loss": result.round.eval_loss,
        "gradient_noise_scale": result.round.gradient_noise_scale,
        "blocks_moved": result.round.blocks_moved,
    }


def device_rows(run_id: int, result: RoundResult) -> list[dict[str, Any]]:
    rows = []
    for d in result.devices:
        row: dict[str, Any] = {name: getattr(d, name) for name in DEVICE_METRIC_COLUMNS}
        row.update(
            run_id=run_id,
            round=d.round,
            cluster=d.cluster,
            device=d.device,
            device_id=d.device_id,
            profile=d.profile,
            available=d.available,
            block_start=d.block_start,
            block_end=d.block_end,
        )
        rows.append(row)
    return rows


def insert_round(session: Session, run_id: int, result: RoundResult) -> bool:
    """Store one round (both tables, one batch each); True when the round was new."""
    round_table: Table = RoundMetric.__table__  # type: ignore[assignment]
    device_table: Table = DeviceMetric.__table__  # type: ignore[assignment]
    stmt: Insert = _insert_ignore(session, round_table, ["run_id", "round"]).returning(round_table.c.id)
    inserted = (
        session.execute(stmt, round_row(run_id, result)).first() is not None
    )  # RETURNING: new rows only
    rows = device_rows(run_id, result)
    if rows:
        session.execute(_insert_ignore(session, device_table, ["run_id", "round", "device_id"]), rows)
    return bool(inserted)
