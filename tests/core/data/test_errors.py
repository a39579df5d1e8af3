from __future__ import annotations

import pytest

from collapipe_core.data import DataError
from collapipe_core.data.errors import FileContext, needed_workspace, quoted_name
from collapipe_core.workspace import FileRefused


def test_a_data_error_is_a_value_error_that_names_its_field() -> None:
    error = DataError("data.files.label_column", "y", "'t.csv' has no column 'y'")
    assert (
        isinstance(error, ValueError) and str(error) == "data.files.label_column: 't.csv' has no column 'y'"
    )
    assert (error.field, error.value, error.message) == (
        "data.files.label_column",
        "y",
        "'t.csv' has no column 'y'",
    )


def test_a_workspace_refusal_keeps_its_field_value_and_message() -> None:
    error = DataError.refused(FileRefused("data.files.eval", "x.csv", "no file named 'x.csv'"))
    assert (error.field, error.value, error.message) == ("data.files.eval", "x.csv", "no file named 'x.csv'")


def test_file_errors_quote_the_whole_name_first() -> None:
    name = "/very/long/" + "directory/" * 12 + "reviews.jsonl"
    error = FileContext("data.files.train", name).error("line 3 is not valid JSON")
    assert error.message == f"'{name}' line 3 is not valid JSON" and error.value == name
    assert quoted_name("a.csv") == "'a.csv'"


def test_reading_files_needs_a_workspace() -> None:
    with pytest.raises(TypeError, match=r"reads files \(data\.files\)"):
        needed_workspace(None, "data.files")
