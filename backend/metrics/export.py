"""A run's records as CSV or Parquet: the rounds table (one row per round) or the devices table."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.orm import Session

from backend.db.models import DEVICE_METRIC_COLUMNS
from backend.metrics import repository as repo

ExportFormat = Literal["csv", "parquet"]
ExportTable = Literal["rounds", "devices"]

ROUND_COLUMNS = (
    "round",
    "policy",
    "latency_s",
    "aggregation_s",
    "objective",
    "objective_latency",
    "objective_convergence",
    "objective_energy",
    "convergence",
    "solve_time_s",
    "solver_iterations",
    "feasible",
    "train_loss",
    "eval_loss",
    "gradient_noise_scale",
    "gradient_variance",
    "gradient_sq_norm",
    "blocks_moved",
    "moves_latency_share",
)
ROUND_LIST_COLUMNS = ("num_microbatches", "makespan_s", "bubble_fraction", "redistribution_s", "violations")
DEVICE_COLUMNS = (
    "round",
    "cluster",
    "device",
    "device_id",
    "profile",
    "available",
    "block_start",
    "block_end",
    *DEVICE_METRIC_COLUMNS,
)


def _round_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    metric_names = sorted({k for r in records for k in (r.get("eval_metrics") or {})})
    rows = []
    for r in records:
        row = {c: r.get(c) for c in ROUND_COLUMNS}
        row.update({c: list(r.get(c) or []) for c in ROUND_LIST_COLUMNS})
        row.update({name: (r.get("eval_metrics") or {}).get(name) for name in metric_names})
        row["decision"] = json.dumps(r.get("decision", {}), sort_keys=True)
        rows.append(row)
    return rows


def table_rows(session: Session, run_id: int, table: ExportTable) -> list[dict[str, Any]]:
    if table == "rounds":
        return _round_rows(repo.all_records(session, run_id))
    return [{c: getattr(d, c) for c in DEVICE_COLUMNS} for d in repo.device_rows(session, run_id)]


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """Text a spreadsheet would read as a formula (it starts with = + - @, a tab or a carriage return)
    with a leading apostrophe, which spreadsheets show as text; anything else as it is. Names come
    from users: a run, study or device profile named ``=HYPERLINK(...)`` must not become a link."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    out = io.StringIO()
    # RFC 4180 line ends: the writer then quotes every field holding a line break, \r included
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\r\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: spreadsheet_safe(json.dumps(v) if isinstance(v, list) else v) for k, v in row.items()}
        )
    return out.getvalue().encode()


def to_parquet(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    table = pa.Table.from_pylist(rows) if rows else pa.table({c: pa.array([], pa.null()) for c in columns})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def export(session: Session, run_id: int, table: ExportTable, fmt: ExportFormat) -> bytes:
    rows = table_rows(session, run_id, table)
    columns = list(rows[0]) if rows else list(ROUND_COLUMNS if table == "rounds" else DEVICE_COLUMNS)
    return to_csv(rows, columns) if fmt == "csv" else to_parquet(rows, columns)
