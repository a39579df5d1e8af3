"""A user's file (``data.files.train`` or ``.eval``) as the columns its task kind needs, checked row by row.

Column mapping (``data.files``): classifier ``text_column`` + ``label_column``; seq2seq
``source_column`` + ``target_column``; causal_lm ``text_column`` (one document per row). The
training file may also have ``group_column`` (the key of the non-IID split). Every text is a
non-empty string; labels are all text, all integers or all booleans (never fractions, never mixed);
group values are single values (text, numbers or booleans). The first row that breaks a rule is
refused with a :class:`~collapipe_core.data.errors.DataError` naming the column's config field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from collapipe_core.config import DataFiles, ExperimentConfig
from collapipe_core.data.errors import DataError, FileContext
from collapipe_core.data.tables import Table, file_format, parse_table
from collapipe_core.quote import short
from collapipe_core.workspace import FileRefused, Workspace

Label = str | int | bool
Which = Literal["train", "eval"]


@dataclass(frozen=True)
class Records:
    """One file's rows: texts (classifier and causal_lm text, seq2seq source) and what else the kind needs."""

    context: FileContext
    table: Table
    digest: str  # of the file's bytes: the cache key of what is built from it
    texts: list[str]
    targets: list[str] | None = None  # seq2seq
    labels: list[Label] | None = None  # classifier
    groups: list[Hashable] | None = None  # training file with data.files.group_column

    def where(self, row: int) -> str:
        return self.table.where(row)


def read_records(config: ExperimentConfig, workspace: Workspace, which: Which) -> Records:
    """The checked rows of ``data.files.<which>``, read through ``workspace``."""
    return parse_records(config, workspace, which, read_file(config, workspace, which))


def read_file(config: ExperimentConfig, workspace: Workspace, which: Which) -> bytes:
    """The bytes of ``data.files.<which>`` (the workspace checks the name and the size)."""
    context = _context(config, which)
    try:
        return workspace.read_bytes(context.field, context.name)
    except FileRefused as err:
        raise DataError.refused(err) from None


def file_digest(data: bytes) -> str:
    """The key of what is built from a file's bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def parse_records(config: ExperimentConfig, workspace: Workspace, which: Which, data: bytes) -> Records:
    """The checked rows of ``data``, the content of ``data.files.<which>``."""
    files, context = config.data.files, _context(config, which)
    assert files is not None
    kind = config.model.kind
    text_field = "source_column" if kind == "seq2seq" else "text_column"
    mapped = [getattr(files, text_field)]
    mapped += (
        [files.target_column] if kind == "seq2seq" else [files.label_column] if kind == "classifier" else []
    )
    mapped += [files.group_column] if which == "train" and files.group_column else []
    fmt = file_format(context, files.format)
    table = parse_table(context, data, fmt, mapped, workspace.max_file_bytes)
    if table.num_rows == 0:
        raise context.error("has no rows, only column names; add the rows to train on")
    texts = _texts(context, table, files, text_field)
    targets = _texts(context, table, files, "target_column") if kind == "seq2seq" else None
    labels = _labels(context, table, files) if kind == "classifier" else None
    groups = _groups(context, table, files.group_column) if which == "train" and files.group_column else None
    return Records(context, table, file_digest(data), texts, targets, labels, groups)


def _context(config: ExperimentConfig, which: Which) -> FileContext:
    files = config.data.files
    if files is None:
        raise ValueError("data.files is not set")
    name = files.train if which == "train" else files.eval
    if name is None:
        raise ValueError("data.files.eval is not set")
    return FileContext(f"data.files.{which}", name)


def _column(context: FileContext, table: Table, field: str, column: str, role: str) -> list[object]:
    if column not in table.names:
        raise context.error(
            f"has no column {short(column)}; its columns are: {table.listed_names()}. Set "
            f"{field} to the column that holds the {role}",
            field=field,
            value=column,
        )
    return table.column(column)


def _texts(context: FileContext, table: Table, files: DataFiles, attribute: str) -> list[str]:
    field, column = f"data.files.{attribute}", str(getattr(files, attribute))
    role = {"text_column": "texts", "source_column": "source texts", "target_column": "target texts"}
    values = _column(context, table, field, column, role[attribute])
    for row, value in enumerate(values):
        problem = None
        if value is None:
            problem = "is missing or null"
        elif not isinstance(value, str):
            problem = f"holds {_kind_of(value)} ({short(value)}), not text; write it as a string"
        elif not value.strip():
            problem = "is empty"
        if problem is not None:
            raise context.error(
                f"{table.where(row)}: column {short(column)} {problem}; every row needs a text there "
                "(fix the row or remove it)",
                field=field,
                value=column,
            )
    return [str(value) for value in values]


def _labels(context: FileContext, table: Table, files: DataFiles) -> list[Label]:
    field, column = "data.files.label_column", files.label_column
    values = _column(context, table, field, column, "class labels")
    first: tuple[int, str] | None = None  # (row, kind) of the first label
    for row, value in enumerate(values):
        problem = None
        if value is None or (isinstance(value, str) and not value.strip()):
            problem = "is empty or null; every row needs a label"
        elif not isinstance(value, str | int):
            problem = f"holds {_kind_of(value)} ({short(value)}); labels must be text or whole numbers"
        elif first is None:
            first = (row, _kind_of(value))
        elif _kind_of(value) != first[1]:
            problem = (
                f"holds {_kind_of(value)} ({short(value)}) but {table.where(first[0])} holds "
                f"{first[1]}; write every label the same way (all text or all whole numbers)"
            )
        if problem is not None:
            message = f"{table.where(row)}: column {short(column)} {problem}"
            raise context.error(message, field=field, value=column)
    return [value for value in values if isinstance(value, str | int)]


def _groups(context: FileContext, table: Table, column: str) -> list[Hashable]:
    field = "data.files.group_column"
    values = _column(context, table, field, column, "group of each row (e.g. its source or author)")
    for row, value in enumerate(values):
        if value is None or not isinstance(value, str | int | float):
            what = "is missing or null" if value is None else f"holds {_kind_of(value)}, not a single value"
            raise context.error(
                f"{table.where(row)}: column {short(column)} {what}; every row needs a group "
                "(text or a number)",
                field=field,
                value=column,
            )
    return [(type(value).__name__, value) for value in values]


def _kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a fraction" if value == value and not value.is_integer() else "a decimal number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"
