from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collapipe_core.data import DataError
from collapipe_core.data.errors import FileContext
from collapipe_core.data.tables import Format, file_format, parse_table

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
