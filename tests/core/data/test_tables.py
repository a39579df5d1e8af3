from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collapipe_core.data import DataError, tables
from collapipe_core.data.errors import FileContext
from collapipe_core.data.tables import MAX_COLUMNS, MAX_ROWS, Format, file_format, parse_table

CONTEXT = FileContext("data.files.train", "reviews.data")


def _parquet(rows: list[dict[str, object]]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def test_jsonl_rows_keep_their_line_numbers_and_types() -> None:
    table = parse_table(CONTEXT, b'{"text": "a", "label": 1}\n\n{"text": "b"}\n', "jsonl")
    assert table.names == ("text", "label") and table.num_rows == 2
    assert table.column("label") == [1, None] and table.where(1) == "line 3"


def test_csv_reads_quoted_fields_over_lines_and_a_byte_order_mark() -> None:
    data = '\ufefftext,label\n"hello, ""world""",pos\n"two\nlines",neg\n'.encode()
    table = parse_table(CONTEXT, data, "csv")
    assert table.names == ("text", "label")
    assert table.column("text") == ['hello, "world"', "two\nlines"] and table.column("label") == [
        "pos",
        "neg",
    ]
    assert [table.where(i) for i in range(2)] == ["line 2", "line 3"]


def test_parquet_columns_keep_their_types_and_rows_count_from_one() -> None:
    table = parse_table(CONTEXT, _parquet([{"text": "a", "label": 3}, {"text": "b", "label": 4}]), "parquet")
    assert table.column("label") == [3, 4] and table.where(1) == "row 2"


def test_format_comes_from_the_setting_or_the_suffix() -> None:
    assert file_format(FileContext("data.files.eval", "dev.CSV"), None) == "csv"
    assert file_format(CONTEXT, "parquet") == "parquet"
    with pytest.raises(DataError) as error:
        file_format(FileContext("data.files.train", "book.xlsx"), None)
    assert error.value.field == "data.files.train" and "'.xlsx'" in error.value.message
    assert "data.files.format" in error.value.message


@pytest.mark.parametrize(
    ("data", "fmt", "expected"),
    [
        (b"", "jsonl", "is empty"),
        (b'{"text": "a"}\n{"text": "b",\n', "jsonl", "line 2 is not valid JSON"),
        (b'{"text": "a"}\n["a", "b"]\n', "jsonl", "line 2 is a JSON array, not an object"),
        (b"text\n\xff\xfe\n", "csv", "line 2 is not UTF-8"),
        (b'text,label\nok,1\n"open,2\n', "csv", "line 3 is not valid CSV"),
        (b"text,label\nok,1\nthree,fields,here\n", "csv", "line 3 has 3 fields but the header"),
        (b"text,text\na,b\n", "csv", "names the column 'text' twice"),
        (b"PAR1 certainly not parquet", "parquet", "is not a readable Parquet file"),
    ],
)
def test_broken_files_name_the_file_and_the_line(data: bytes, fmt: Format, expected: str) -> None:
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, data, fmt)
    assert error.value.field == "data.files.train" and error.value.value == "reviews.data"
    assert error.value.message.startswith("'reviews.data' ") and expected in error.value.message


def test_messages_never_quote_the_content() -> None:
    secret = "s3cr3t-" * 50
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, f'{{"text": "{secret}"\n'.encode(), "jsonl")
    assert "s3cr3t" not in str(error.value)


def _dictionary_parquet(num_rows: int, value: str, **columns: pa.Array) -> bytes:
    """``num_rows`` copies of ``value`` in a dictionary-encoded zstd column: a few KB on disk."""
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(num_rows, dtype=np.int32)), pa.array([value]))
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": text, **columns}), sink, compression="zstd", row_group_size=num_rows)
    return sink.getvalue()


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to decode a Parquet file's rows fails the test: refusals come from the metadata."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the rows were decoded")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", refuse)
    monkeypatch.setattr(pq.ParquetFile, "read", refuse)
    monkeypatch.setattr(pq, "read_table", refuse)


def test_a_parquet_bomb_is_refused_from_its_metadata(no_decoding: None) -> None:
    bomb = _dictionary_parquet(MAX_ROWS + 1, "ab")
    assert len(bomb) < 64 * 2**10  # the trial's bomb: 82 KB on disk for 10 M rows
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, bomb, "parquet", ("text",))
    assert error.value.field == "data.files.train"
    assert f"has {MAX_ROWS + 1:,} rows; CollaPipe reads at most {MAX_ROWS:,} rows per file" in (
        error.value.message
    )


def test_a_parquet_file_whose_columns_decode_past_the_limit_is_refused_before_decoding(
    no_decoding: None,
) -> None:
    data = _dictionary_parquet(4, "a" * 2**20)  # a 1 MiB value in the dictionary page, compressed
    assert len(data) < 2**14
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, data, "parquet", ("text",), max_decoded_bytes=2**19)
    assert "decode to 1.0 MiB" in error.value.message and "0.5 MiB" in error.value.message


def test_dictionary_values_repeated_past_the_limit_are_refused_while_reading() -> None:
    data = _dictionary_parquet(2000, "a" * 1000)  # 1 KB in the dictionary page, 2 MB once repeated
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, data, "parquet", ("text",), max_decoded_bytes=2**20)
    assert "more than 1.0 MiB of values" in error.value.message


def test_only_the_mapped_parquet_columns_are_read() -> None:
    blob = pa.array([[1.0] * 100_000] * 30, pa.list_(pa.float64()))  # 24 MB decoded, not mapped
    data = _dictionary_parquet(30, "ab", label=pa.array(range(30)), blob=blob)
    table = parse_table(CONTEXT, data, "parquet", ("text", "label"), max_decoded_bytes=2**20)
    assert table.names == ("text", "label", "blob") and table.num_rows == 30
    assert table.column("text") == ["ab"] * 30 and table.column("label") == list(range(30))
    assert table.where(29) == "row 30"


def test_a_mapped_parquet_column_of_lists_is_refused_by_its_type(no_decoding: None) -> None:
    data = _dictionary_parquet(3, "ab", label=pa.array([[1], [2], [3]]))
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, data, "parquet", ("text", "label"))
    assert "column 'label' holds 'list<element: int64>' values" in error.value.message


def _file(fmt: Format, rows: list[dict[str, object]]) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows).encode()
    if fmt == "csv":
        return ("text,label\n" + "".join(f"{row['text']},{row['label']}\n" for row in rows)).encode()
    return _parquet(rows)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_files_with_more_rows_than_the_limit_are_refused(
    fmt: Format, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "MAX_ROWS", 3)
    rows: list[dict[str, object]] = [{"text": f"t{i}", "label": i} for i in range(4)]
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, _file(fmt, rows), fmt, ("text",))
    assert "rows; CollaPipe reads at most 3 rows per file" in error.value.message
    assert parse_table(CONTEXT, _file(fmt, rows[:3]), fmt, ("text",)).num_rows == 3


def test_a_csv_header_wider_than_the_limit_is_refused_first() -> None:
    header = ",".join(f"c{i}" for i in range(MAX_COLUMNS + 1))
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, f"{header}\n{'x,' * MAX_COLUMNS}x\n".encode(), "csv")
    assert f"names {MAX_COLUMNS + 1:,} columns; CollaPipe reads files of at most {MAX_COLUMNS:,}" in (
        error.value.message
    )


def test_a_repeated_csv_column_in_a_wide_header_is_found() -> None:
    names = [f"c{i}" for i in range(MAX_COLUMNS - 1)] + ["c7"]
    with pytest.raises(DataError, match="names the column 'c7' twice"):
        parse_table(CONTEXT, (",".join(names) + "\n").encode(), "csv")


def test_jsonl_lines_with_more_keys_than_the_limit_are_refused() -> None:
    lines = [{"text": "a", **{f"k{i}": 0 for i in range(MAX_COLUMNS // 2)}}]
    lines.append({"text": "b", **{f"j{i}": 0 for i in range(MAX_COLUMNS // 2)}})
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, "".join(json.dumps(line) + "\n" for line in lines).encode(), "jsonl")
    assert f"line 2 brings the keys to more than {MAX_COLUMNS:,}" in error.value.message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[" * 100_000 + "]" * 100_000, "line 2 is nested deeper than"),
        ('{"text": "b", "extra": ' + '{"a": ' * 5000 + "1" + "}" * 5001, "line 2 is nested deeper than"),
        ('{"text": "b", "label": ' + "9" * 5000 + "}", "line 2 holds a number of more than 4300 digits"),
    ],
)
def test_hostile_jsonl_lines_are_refused_naming_the_line(line: str, expected: str) -> None:
    with pytest.raises(DataError) as error:
        parse_table(CONTEXT, ('{"text": "a"}\n' + line + "\n").encode(), "jsonl")
    assert error.value.field == "data.files.train" and expected in error.value.message
    assert len(error.value.message) < 400
