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

Only the columns a caller asks for are kept. Sizes are bounded before they cost memory: at most
:data:`MAX_ROWS` rows and :data:`MAX_COLUMNS` columns in every format; a Parquet file is judged by its
metadata (rows, column types, uncompressed bytes of the columns read) before anything is decoded,
then read a batch at a time with text left dictionary-encoded until its decoded size is counted
against the caller's byte limit (compression can hide any size: a few KB of dictionary pages can
decode to gigabytes).

Every problem is a :class:`~collapipe_core.data.errors.DataError` naming the file's config field and
the line or row; none quotes the file's content.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from collapipe_core.data.errors import DataError, FileContext
from collapipe_core.quote import short

Format = Literal["jsonl", "csv", "parquet"]
SUFFIXES: dict[str, Format] = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
MAX_LISTED_COLUMNS = 12  # column names are the file's content: a few, each cut short
MAX_NAME_CHARS = 40
MAX_ROWS = 1_000_000
"""Most rows (lines of JSONL, records of CSV, rows of Parquet) read from one file."""
MAX_COLUMNS = 1_000
"""Most columns a file may have (JSONL: distinct keys over all lines)."""
MAX_PARQUET_FOOTER_BYTES = 16 * 2**20
"""Largest Parquet footer (the file's metadata) parsed: thousands of row groups of a thousand columns."""
BATCH_ROWS = 65_536  # Parquet rows decoded at a time
_ROWS_HINT = (
    "keep the rows the experiment needs (network.num_clusters × data.samples_per_cluster + "
    "data.eval_samples) or give held-out rows their own file in data.files.eval"
)
_PARQUET_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_boolean)
_PARQUET_LOOSE = (pa.types.is_floating, pa.types.is_binary, pa.types.is_large_binary, pa.types.is_null)
"""Types read as they are and judged per row by the records' checks (a fraction, bytes, a null)."""


@dataclass
class Table:
    """A file's column names and the values of the columns that were read, one per row."""

    names: tuple[str, ...]  # every column of the file, in its order
    num_rows: int
    unit: Literal["line", "row"]  # how a row number reads in a message: "line 7" or "row 7"
    row_numbers: list[int] | None  # 1-based, one per row; None: rows count from 1 (Parquet)
    values: dict[str, list[object]] = field(default_factory=dict)  # the columns read

    def column(self, name: str) -> list[object]:
        return self.values[name]

    def where(self, row: int) -> str:
        """The position of row ``row`` (0-based) as a message shows it: ``line 7``."""
        number = row + 1 if self.row_numbers is None else self.row_numbers[row]
        return f"{self.unit} {number}"

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


def parse_table(
    context: FileContext,
    data: bytes,
    fmt: Format,
    columns: Collection[str] | None = None,
    max_decoded_bytes: int | None = None,
) -> Table:
    """The file's rows, with the values of ``columns`` (those the file has; None: every column).

    DataError when the file is empty, not of its format, broken at some row, or larger than the limits:
    more than :data:`MAX_ROWS` rows or :data:`MAX_COLUMNS` columns, or (Parquet, whose compression can
    hide any size) columns read that would decode to more than ``max_decoded_bytes``.
    """
    if not data.strip():
        raise context.error(f"is empty; it must hold the {fmt.upper()} rows to train on")
    if fmt == "parquet":
        return _parquet(context, data, columns, max_decoded_bytes)
    if fmt == "jsonl":
        return _jsonl(context, data, columns)
    return _csv(context, _decoded(context, data), columns)


def _too_many_rows(context: FileContext, count: str) -> DataError:
    return context.error(
        f"has {count} rows; CollaPipe reads at most {MAX_ROWS:,} rows per file: {_ROWS_HINT}"
    )


def _decoded(context: FileContext, data: bytes, offset: int = 0) -> str:
    """UTF-8 text (a byte-order mark at the file's start is dropped); ``offset``: where ``data`` starts."""
    try:
        return data.decode("utf-8-sig" if offset == 0 else "utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise context.error(
            f"line {line} is not UTF-8 text (byte {offset + err.start}); save the file as UTF-8"
        ) from None


def _jsonl(context: FileContext, data: bytes, columns: Collection[str] | None) -> Table:
    values: dict[str, list[object]] = {name: [] for name in columns or ()}
    numbers: list[int] = []
    names: dict[str, None] = {}
    offset = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        start, offset = offset, offset + len(raw) + 1
        if not raw.strip():
            continue
        if len(numbers) == MAX_ROWS:
            raise _too_many_rows(context, f"more than {MAX_ROWS:,}")
        line = _decoded(context, raw, start).replace("\n", "")
        row = _json_line(context, number, line)
        for name in row:
            if name not in names:
                if len(names) == MAX_COLUMNS:
                    raise context.error(
                        f"line {number} brings the keys to more than {MAX_COLUMNS:,}; CollaPipe reads files "
                        f"of at most {MAX_COLUMNS:,} columns: keep the keys data.files maps"
                    )
                names[name] = None
                if columns is None:
                    values[name] = [None] * len(numbers)
        for name, column in values.items():
            column.append(row.get(name))
        numbers.append(number)
    return Table(tuple(names), len(numbers), "line", numbers, {n: v for n, v in values.items() if n in names})


def _json_line(context: FileContext, number: int, line: str) -> dict[str, object]:
    example = 'each line must be one JSON object such as {"text": "...", "label": "..."}'
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise context.error(
            f"line {number} is not valid JSON ({err.msg} at column {err.colno}); {example}"
        ) from None
    except RecursionError:
        raise context.error(
            f"line {number} is nested deeper than CollaPipe reads (about {sys.getrecursionlimit()} "
            f"levels); {example}, its values single texts, numbers or booleans"
        ) from None
    except ValueError:  # Python refuses integers of more than sys.get_int_max_str_digits() digits
        raise context.error(
            f"line {number} holds a number of more than {sys.get_int_max_str_digits()} digits; write "
            "labels and groups as short numbers or texts"
        ) from None
    if not isinstance(row, dict):
        raise context.error(f"line {number} is a JSON {_json_type(row)}, not an object; {example}")
    return row


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else "number" if not isinstance(value, bool) else "boolean"


def _csv(context: FileContext, text: str, columns: Collection[str] | None) -> Table:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    numbers: list[int] = []
    header: list[str] | None = None
    read: list[tuple[str, int]] = []  # (name, index) of the columns read
    values: dict[str, list[object]] = {}
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
            read = [(name, i) for i, name in enumerate(header) if columns is None or name in columns]
            values = {name: [] for name, _ in read}
        elif len(record) != len(header):
            raise context.error(
                f"line {start} has {len(record)} fields but the header (line 1) names {len(header)} "
                "columns; every row needs one value per column (quote values that contain commas)"
            )
        elif len(numbers) == MAX_ROWS:
            raise _too_many_rows(context, f"more than {MAX_ROWS:,}")
        else:
            for name, i in read:
                values[name].append(record[i])
            numbers.append(start)
    if header is None:
        raise context.error("has no header line; the first line must name the columns")
    return Table(tuple(header), len(numbers), "line", numbers, values)


def _checked_header(context: FileContext, header: list[str]) -> list[str]:
    if len(header) > MAX_COLUMNS:
        raise context.error(
            f"names {len(header):,} columns; CollaPipe reads files of at most {MAX_COLUMNS:,} columns: keep "
            "the columns data.files maps"
        )
    repeated = [name for name, count in Counter(header).items() if count > 1]
    if repeated:
        raise context.error(f"names the column {short(repeated[0])} twice in its header (line 1); rename one")
    return header


def _parquet(
    context: FileContext, data: bytes, columns: Collection[str] | None, max_bytes: int | None
) -> Table:
    """Checked from the metadata (rows, columns, types, uncompressed sizes) before anything is decoded;
    then only the columns read, a batch at a time, text kept dictionary-encoded until its decoded size
    is known."""
    footer = int.from_bytes(data[-8:-4], "little") if len(data) >= 12 and data.endswith(b"PAR1") else 0
    if footer > MAX_PARQUET_FOOTER_BYTES:
        raise context.error(
            f"has {footer / 2**20:.1f} MiB of Parquet metadata, more than the "
            f"{MAX_PARQUET_FOOTER_BYTES / 2**20:.0f} MiB CollaPipe reads; write it with fewer row groups "
            "(pyarrow's row_group_size) and columns"
        )
    try:
        file = pq.ParquetFile(pa.BufferReader(data))
        schema, meta = file.schema_arrow, file.metadata
    except (pa.ArrowException, OSError, ValueError) as err:
        raise _unreadable(context, err) from None
    names = tuple(str(name) for name in schema.names)
    _checked_header(context, list(names))
    if meta.num_rows > MAX_ROWS:
        raise _too_many_rows(context, f"{meta.num_rows:,}")
    read = [name for name in names if columns is None or name in columns]
    for name in read:
        kind = _value_type(schema.field(name).type)
        if not any(test(kind) for test in _PARQUET_TYPES + _PARQUET_LOOSE):
            raise context.error(
                f"column {short(name)} holds {short(str(kind), 60)} values; CollaPipe reads columns of "
                "texts, whole numbers or booleans (write one value per cell)"
            )
    if max_bytes is not None:
        stored = sum(
            chunk.total_uncompressed_size
            for group in range(meta.num_row_groups)
            for chunk in (meta.row_group(group).column(i) for i in range(meta.num_columns))
            if chunk.path_in_schema.split(".")[0] in read
        )
        if stored > max_bytes:
            raise _decodes_past(context, f"decode to {stored / 2**20:.1f} MiB", max_bytes)
    texts = [
        name for name in read if _value_type(schema.field(name).type) in (pa.string(), pa.large_string())
    ]
    values: dict[str, list[object]] = {name: [] for name in read}
    decoded = 0
    try:
        reader = pq.ParquetFile(pa.BufferReader(data), read_dictionary=texts)
        for batch in reader.iter_batches(batch_size=BATCH_ROWS, columns=read, use_threads=False):
            for name, array in zip(batch.schema.names, batch.columns, strict=True):
                decoded += _decoded_bytes(array)
                if max_bytes is not None and decoded > max_bytes:
                    raise _decodes_past(
                        context, f"hold more than {max_bytes / 2**20:.1f} MiB of values", max_bytes
                    )
                values[name].extend(array.to_pylist())
    except (pa.ArrowException, OSError, ValueError) as err:
        raise _unreadable(context, err) from None
    return Table(names, meta.num_rows, "row", None, values)


def _value_type(kind: pa.DataType) -> pa.DataType:
    """The type of a column's values (a dictionary-encoded column's: its dictionary's)."""
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _decoded_bytes(array: pa.Array) -> int:
    """What ``array`` takes once its dictionary (if any) is expanded, as Python values."""
    if isinstance(array, pa.DictionaryArray):
        lengths = pc.fill_null(pc.binary_length(array.dictionary), 0)
        return int(pc.sum(pc.take(lengths, array.indices.fill_null(0))).as_py() or 0) + 8 * len(array)
    return int(array.nbytes)


def _decodes_past(context: FileContext, what: str, limit: int) -> DataError:
    return context.error(
        f"columns data.files maps {what}, more than the {limit / 2**20:.1f} MiB a data file may hold "
        "(COLLAPIPE_MAX_FILE_BYTES; Parquet compression can hide any size); keep fewer or shorter rows"
    )


def _unreadable(context: FileContext, err: Exception) -> DataError:
    reason = str(err).split("': ", 1)[-1].splitlines()[0] if str(err) else type(err).__name__
    return context.error(
        f"is not a readable Parquet file ({short(reason, 120)}); write it with pyarrow or pandas "
        "(DataFrame.to_parquet), or set data.files.format if it is JSONL or CSV"
    )
