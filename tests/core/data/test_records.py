from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import DataError
from collapipe_core.data.records import read_records
from collapipe_core.workspace import Workspace

MakeFilesConfig = Callable[..., ExperimentConfig]  # the conftest fixtures
WriteRows = Callable[[list[dict[str, Any]], str], str]
LOCAL = Workspace.local()


def test_classifier_rows_give_texts_labels_and_groups(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    rows: list[dict[str, Any]] = [
        {"body": "a b", "y": "pos", "site": "x"},
        {"body": "c", "y": "neg", "site": 7},
    ]
    config = make_files_config(
        "classifier",
        write_rows(rows, "t.jsonl"),
        files={"text_column": "body", "label_column": "y", "group_column": "site"},
    )
    records = read_records(config, LOCAL, "train")
    assert records.texts == ["a b", "c"] and records.labels == ["pos", "neg"] and records.targets is None
    assert records.groups == [("str", "x"), ("int", 7)] and records.where(1) == "line 2"


def test_seq2seq_rows_give_sources_and_targets(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    config = make_files_config("seq2seq", write_rows([{"source": "hi", "target": "salut"}], "t.csv"))
    records = read_records(config, LOCAL, "train")
    assert records.texts == ["hi"] and records.targets == ["salut"] and records.labels is None


def test_the_eval_file_needs_no_group_column(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    train = write_rows([{"text": "a", "label": 1, "g": "x"}], "t.parquet")
    held = write_rows([{"text": "b", "label": 0}], "e.parquet")
    config = make_files_config("classifier", train, eval=held, files={"group_column": "g"})
    assert read_records(config, LOCAL, "eval").groups is None


LABEL, TEXT = "data.files.label_column", "data.files.text_column"
BAD_ROWS: list[tuple[str, list[dict[str, Any]], str, str]] = [
    ("classifier", [{"text": "a", "lbl": 1}], LABEL, "has no column 'label'; its columns are: 'text', 'lbl'"),
    ("causal_lm", [{"text": "a"}, {"text": None}], TEXT, "line 2: column 'text' is missing or null"),
    ("causal_lm", [{"text": "a"}, {"text": "  "}], TEXT, "line 2: column 'text' is empty"),
    (
        "seq2seq",
        [{"source": 5, "target": "x"}],
        "data.files.source_column",
        "line 1: column 'source' holds a whole number (5), not text",
    ),
    (
        "classifier",
        [{"text": "a", "label": 1}, {"text": "b", "label": "2"}],
        LABEL,
        "line 2: column 'label' holds text ('2') but line 1 holds a whole number",
    ),
    (
        "classifier",
        [{"text": "a", "label": 0.5}],
        LABEL,
        "holds a fraction (0.5); labels must be text or whole",
    ),
    (
        "classifier",
        [{"text": "a", "label": True}, {"text": "b", "label": 1}],
        LABEL,
        "holds a whole number (1) but line 1 holds a boolean",
    ),
    ("classifier", [{"text": "a", "label": None}], LABEL, "line 1: column 'label' is empty or null"),
]


@pytest.mark.parametrize(("kind", "rows", "field", "expected"), BAD_ROWS)
def test_bad_rows_name_the_column_field_the_file_and_the_line(
    write_rows: WriteRows,
    make_files_config: MakeFilesConfig,
    kind: str,
    rows: list[dict[str, Any]],
    field: str,
    expected: str,
) -> None:
    config = make_files_config(kind, write_rows(rows, "data.jsonl"))
    with pytest.raises(DataError) as error:
        read_records(config, LOCAL, "train")
    assert error.value.field == field and expected in error.value.message
    assert error.value.message.startswith("'") and "data.jsonl' " in error.value.message


def test_a_bad_group_value_names_the_group_column(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    train = write_rows([{"text": "a", "label": 1, "g": [1, 2]}], "t.jsonl")
    with pytest.raises(DataError, match=r"line 1: column 'g' holds a list, not a single value") as error:
        read_records(make_files_config("classifier", train, files={"group_column": "g"}), LOCAL, "train")
    assert error.value.field == "data.files.group_column"


def test_a_missing_file_comes_from_the_workspace_as_a_data_error(
    tmp_path: Path, make_files_config: MakeFilesConfig
) -> None:
    config = make_files_config("classifier", "train.jsonl")
    with pytest.raises(DataError, match=r"no file named 'train\.jsonl' in the data directory") as error:
        read_records(config, Workspace(data_dir=tmp_path), "train")
    assert error.value.field == "data.files.train" and error.value.value == "train.jsonl"


def test_a_header_without_rows_is_refused(tmp_path: Path, make_files_config: MakeFilesConfig) -> None:
    (tmp_path / "t.csv").write_text("text,label\n")
    with pytest.raises(DataError, match=r"'.*t\.csv' has no rows, only column names"):
        read_records(make_files_config("classifier", str(tmp_path / "t.csv")), LOCAL, "train")
