"""A run's records as CSV or Parquet: the rounds table (one row per round) or the devices table.

A run's export is streamed: the devices table (rounds x devices rows) is read ``EXPORT_BATCH`` rows at
a time, each batch in a short session of its own, and written out as it is read, so neither the API's
memory nor a pooled connection is held for the whole table.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from backend.db.engine import SessionFactory
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


EXPORT_BATCH = 5000


def table_batches(
    session_factory: SessionFactory, run_id: int, table: ExportTable
) -> Iterator[list[dict[str, Any]]]:
    """The table's rows, a batch at a time (the rounds table in one batch: its columns depend on every
    round's evaluation figures)."""
    if table == "rounds":
        with session_factory() as session:
            yield _round_rows(repo.all_records(session, run_id))
        return
    after: tuple[int, int, int] | None = None
    while True:
        with session_factory() as session:
            rows = repo.device_rows_after(session, run_id, after, EXPORT_BATCH)
            batch = [{c: getattr(d, c) for c in DEVICE_COLUMNS} for d in rows]
        if batch:
            yield batch
        if len(batch) < EXPORT_BATCH:
            return
        last = batch[-1]
        after = (last["round"], last["cluster"], last["device"])


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """Text a spreadsheet would read as a formula (it starts with = + - @, a tab or a carriage return)
    with a leading apostrophe, which spreadsheets show as text; anything else as it is. Names come
    from users: a run, study or device profile named ``=HYPERLINK(...)`` must not become a link."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def csv_chunks(batches: Iterable[list[dict[str, Any]]], columns: list[str]) -> Iterator[bytes]:
    """The CSV text of the batches' rows, the header first, a chunk per batch."""
    out = io.StringIO()
    # RFC 4180 line ends: the writer then quotes every field holding a line break, \r included
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\r\n")
    writer.writeheader()
    for rows in batches:
        for row in rows:
            writer.writerow(
                {k: spreadsheet_safe(json.dumps(v) if isinstance(v, list) else v) for k, v in row.items()}
            )
        yield out.getvalue().encode()
        out.seek(0)
        out.truncate()
    if out.tell():  # no batch: the header alone
        yield out.getvalue().encode()


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    return b"".join(csv_chunks([rows], columns))


class _Chunks(io.RawIOBase):
    """A write-only stream whose bytes are taken out as they are written."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.written.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self.written = b"".join(self.written), []
        return data


def parquet_chunks(batches: Iterable[list[dict[str, Any]]], columns: list[str]) -> Iterator[bytes]:
    """A Parquet file of the batches' rows, a row group per batch, its bytes as they are written."""
    sink = _Chunks()
    writer: pq.ParquetWriter | None = None
    for rows in batches:
        table = pa.Table.from_pylist(rows)
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema)
        writer.write_table(table.cast(writer.schema))
        yield sink.take()
    if writer is None:  # no rows: the columns, typeless
        writer = pq.ParquetWriter(sink, pa.schema([(c, pa.null()) for c in columns]))
    writer.close()
    yield sink.take()


def to_parquet(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    return b"".join(parquet_chunks([rows] if rows else [], columns))


def export(
    session_factory: SessionFactory, run_id: int, table: ExportTable, fmt: ExportFormat
) -> Iterator[bytes]:
    """The run's table as a CSV or Parquet file, a chunk at a time."""
    batches = table_batches(session_factory, run_id, table)
    first = next(batches, [])
    columns = list(first[0]) if first else list(ROUND_COLUMNS if table == "rounds" else DEVICE_COLUMNS)
    every = _chained(first, batches)
    return csv_chunks(every, columns) if fmt == "csv" else parquet_chunks(every, columns)


def _chained(
    first: list[dict[str, Any]], rest: Iterator[list[dict[str, Any]]]
) -> Iterator[list[dict[str, Any]]]:
    if first:
        yield first
    yield from rest
