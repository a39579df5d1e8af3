"""A user's data file (JSONL, CSV or Parquet) read from memory into named columns with row numbers.

The file's bytes come from the :class:`~collapipe_core.workspace.Workspace` (which checks the name
and the size); nothing here opens a path. The format is ``data.files.format`` or the file's suffix:

- **JSONL** (``.jsonl``): UTF-8, one JSON object per line (``{"text": "...", "label": 3}``); blank
  lines are skipped; a key absent from a line reads as null. Row numbers are line numbers.
- **CSV** (``.csv``): UTF-8 (a byte-order mark is allowed), comma-separated, the first line names
  the columns; a field holding commas, quotes or line breaks is put in double quotes, a quote inside
  it doubled. Every value is text. Row numbers are the line a record starts on.
- **Parquet** (``.parquet``): read with pyarrow; values keep their column's type. Row numbers count
  rows from 1.

Every problem is a :class:`~collapipe_core.data.errors.DataError` naming the file's config field and
the line or row; none quotes the file's content.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from collapipe_core.data.errors import FileContext
from collapipe_core.quote import short

Format = Literal["jsonl", "csv", "parquet"]
SUFFIXES: dict[str, Format] = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
MAX_LISTED_COLUMNS = 12  # column names are the file's content: a few, each cut short
MAX_NAME_CHARS = 40


@dataclass
class Table:
    """A file's columns. ``column`` converts a column to Python values the first time it is asked for."""

    names: tuple[str, ...]
    num_rows: int
    unit: Literal["line", "row"]  # how a row number reads in a message: "line 7" or "row 7"
    row_numbers: list[int]  # 1-based, one per row
    _values: dict[str, list[object]] = field(default_factory=dict)
    _arrow: pa.Table | None = None

    def column(self, name: str) -> list[object]:
        if name not in self._values and self._arrow is not None:
            self._values[name] = self._arrow.column(name).to_pylist()
        return self._values[name]

    def where(self, row: int) -> str:
        """The position of row ``row`` (0-based) as a message shows it: ``line 7``."""
        return f"{self.unit} {self.row_numbers[row]}"

    def listed_names(self) -> str:
        shown = ", ".join(short(name, MAX_NAME_CHARS) for name in self.names[:MAX_LISTED_COLUMNS])
        more = len(self.names) - MAX_LISTED_COLUMNS
        return shown + (f" and {more} more" if more > 0 else "") if self.names else "none"


def file_format(context: FileContext, configured: Format | None) -> Format:
    """``configured`` or the format the file name's suffix says; DataError when neither tells."""
    if configured is not None:
        return configured
    suffix = PurePosixPath(context.name).suffix.lower()
    if suffix in SUFFIXES:
        return SUFFIXES[suffix]
    raise context.error(
        f"has no suffix CollaPipe reads ({short(suffix) if suffix else 'none'}); use a .jsonl, .csv or "
        ".parquet file, or set data.files.format to jsonl, csv or parquet if it is one of those"
    )


def parse_table(context: FileContext, data: bytes, fmt: Format) -> Table:
    """The file's rows; DataError when it is empty, not of its format or broken at some row."""
    if not data.strip():
        raise context.error(f"is empty; it must hold the {fmt.upper()} rows to train on")
    if fmt == "parquet":
        return _parquet(context, data)
    text = _decoded(context, data)
    return _jsonl(context, text) if fmt == "jsonl" else _csv(context, text)


def _decoded(context: FileContext, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise context.error(
            f"line {line} is not UTF-8 text (byte {err.start}); save the file as UTF-8"
        ) from None


def _jsonl(context: FileContext, text: str) -> Table:
    rows: list[dict[str, object]] = []
    numbers: list[int] = []
    names: dict[str, None] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise context.error(
                f"line {number} is not valid JSON ({err.msg} at column {err.colno}); each line must be "
                'one JSON object such as {"text": "...", "label": "..."}'
            ) from None
        if not isinstance(row, dict):
            raise context.error(
                f"line {number} is a JSON {_json_type(row)}, not an object; each line must be one JSON "
                'object such as {"text": "...", "label": "..."}'
            )
        rows.append(row)
        numbers.append(number)
        names.update(dict.fromkeys(row))
    values = {name: [row.get(name) for row in rows] for name in names}
    return Table(tuple(names), len(rows), "line", numbers, values)


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else "number" if not isinstance(value, bool) else "boolean"


def _csv(context: FileContext, text: str) -> Table:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[list[str]] = []
    numbers: list[int] = []
    header: list[str] | None = None
    while True:
        start = reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            raise context.error(
                f"line {start} is not valid CSV ({err}); quote fields that hold commas, quotes "
                'or line breaks ("a, b"), double quotes inside them ("say ""hi""")'
            ) from None
        if not record:
            continue  # a blank line
        if header is None:
            header = _checked_header(context, record)
        elif len(record) != len(header):
            raise context.error(
                f"line {start} has {len(record)} fields but the header (line 1) names {len(header)} "
                "columns; every row needs one value per column (quote values that contain commas)"
            )
        else:
            records.append(record)
            numbers.append(start)
    if header is None:
        raise context.error("has no header line; the first line must name the columns")
    values: dict[str, list[object]] = {name: [r[i] for r in records] for i, name in enumerate(header)}
    return Table(tuple(header), len(records), "line", numbers, values)


def _checked_header(context: FileContext, header: list[str]) -> list[str]:
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise context.error(f"names the column {short(repeated[0])} twice in its header (line 1); rename one")
    return header


def _parquet(context: FileContext, data: bytes) -> Table:
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        reason = str(err).split("': ", 1)[-1].splitlines()[0] if str(err) else type(err).__name__
        raise context.error(
            f"is not a readable Parquet file ({short(reason, 120)}); write it with pyarrow or pandas "
            "(DataFrame.to_parquet), or set data.files.format if it is JSONL or CSV"
        ) from None
    names = tuple(str(name) for name in table.column_names)
    return Table(names, table.num_rows, "row", list(range(1, table.num_rows + 1)), _arrow=table)
