"""The HTML report reads like the study page: the same figures (against the axis the page draws first:
bars with 95 % whiskers for policies, lines with bands against V on a log axis; never against an
override), the summary table with formatted numbers and units (no raw interval columns), the round
series in distinct colours with a log-y switch, and the study's definition in words, not as JSON."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from backend.studies.grid import Axis, Cell
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api
from tests.backend.studies.stored import store_study

pytestmark = pytest.mark.deployments("embedded")  # reads of stored rows: one database is enough

POLICIES = ("dssda", "uniform", "fl")
ROUNDS = 3


def _latency(cell: Cell, seed: int, _round: int) -> float:
    """13 ms + 1 ms per seed (seeds 1 and 2: mean 13.5 ms ± 6.35 ms), × 100 for bert's fl (an outlier)."""
    scale = 100.0 if (cell.base, cell.values.get("scheduler.policy")) == ("bert", "fl") else 1.0
    return scale * (0.012 + 0.001 * seed) * (1 + POLICIES.index(cell.values.get("scheduler.policy", "dssda")))


def _report(api: Api, study_id: int) -> str:
    params = {"format": "html"}
    response = api.client.get(f"/api/studies/{study_id}/export", params=params, headers=api.as_("viewer"))
    assert response.status_code == 200, response.text
    return response.text


def _figures(page: str) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(traces, layout) of every figure the report draws."""
    decoder, found = json.JSONDecoder(), []
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        traces, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, re.compile(r",\s*").match(page, end).end())  # type: ignore[union-attr]
        found.append((traces, layout))
    return found


def _titled(figures: list[tuple[list[dict[str, Any]], dict[str, Any]]], start: str) -> Any:
    return next((t, la) for t, la in figures if la["title"]["text"].startswith(start))


@pytest.fixture
def paper_like(api: Api) -> int:
    """Two bases × three policies × two seeds, every run cut to 3 rounds (an override)."""
    return store_study(
        api.session_factory,
        api.user_ids["operator"],
        "paper-like",
        {"transformer": tiny_config(), "bert": tiny_config()},
        [Axis("scheduler.policy", POLICIES), Axis("seed", (1, 2)), Axis("training.rounds", (ROUNDS,))],
        _latency,
        baseline={"scheduler.policy": "uniform"},
    )


def test_a_study_of_policies_is_drawn_as_bars_with_whiskers_never_against_its_override(
    api: Api, paper_like: int
) -> None:
    figures = _figures(_report(api, paper_like))
    for _, layout in figures:
        assert layout["xaxis"].get("title", {}).get("text") != "training.rounds"
        assert layout["xaxis"].get("type") != "log"
    traces, layout = _titled(figures, "mean_latency_s")
    assert layout["xaxis"]["title"]["text"] == "scheduler.policy" and layout["barmode"] == "group"
    assert [(t["type"], t["name"], t["x"]) for t in traces] == [
        ("bar", name, list(POLICIES)) for name in ("transformer", "bert")
    ]
    dssda = traces[0]
    assert dssda["y"][0] == pytest.approx(0.0135)
    half = 12.706204736174705 * 0.0005  # t(0.975, 1) · s / √2 of 13 ms and 14 ms
    assert dssda["error_y"]["array"][0] == pytest.approx(half)
    assert dssda["error_y"]["arrayminus"][0] == pytest.approx(half)
    assert layout["yaxis"]["title"]["text"] == "mean_latency_s (s)" and layout["yaxis"]["ticksuffix"] == "s"


def test_the_round_series_has_a_colour_per_cell_and_a_log_y_switch(api: Api, paper_like: int) -> None:
    traces, layout = _titled(_figures(_report(api, paper_like)), "round series")
    assert len(traces) == 6 and len({t["line"]["color"] for t in traces}) == 6
    assert [t["name"] for t in traces[:3]] == [
        'transformer, policy="dssda"',
        'transformer, policy="uniform"',
        'transformer, policy="fl"',
    ]
    assert all(t["x"] == list(range(ROUNDS)) for t in traces)
    buttons = [b for menu in layout["updatemenus"] for b in menu["buttons"]]
    assert {b["label"]: b["args"] for b in buttons} == {
        "linear y": [{"yaxis.type": "linear"}],
        "log y": [{"yaxis.type": "log"}],
    }


def test_the_table_gives_formatted_numbers_with_units_and_the_definition_reads_as_words(
    api: Api, paper_like: int
) -> None:
    page = _report(api, paper_like)
    table = page[page.index("<table") : page.index("</table>")]
    assert "ci95" not in table and "_ratio" not in table
    assert "mean_latency_s <span" in table and "(s)" in table
    assert "13.5 ms ± 6.35 ms" in table  # transformer's dssda cell
    assert "×0.500" in table  # its ratio to uniform's 27 ms
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)
    assert len(rows) == 1 + 6 and all("rounds=" not in row for row in rows)
    assert "<h2>Definition</h2>" not in page and '"bases"' not in page and '"experiment_id"' not in page
    text = re.sub(r"<[^>]+>", "", page.split("<table", 1)[0])
    assert "Every cell: training.rounds = 3" in text
    assert "scheduler.policy: dssda, uniform, fl" in text and "Bases: transformer, bert" in text
    assert "Ratios against: scheduler.policy = uniform" in text


def test_a_v_sweep_is_drawn_against_v_on_a_log_axis_with_bands(api: Api) -> None:
    values = (1.0, 10.0, 100.0, 1000.0, 10000.0)
    study_id = store_study(
        api.session_factory,
        api.user_ids["operator"],
        "v-sweep-like",
        {"transformer": tiny_config()},
        [Axis("scheduler.policy", ("dssda",)), Axis("scheduler.V", values), Axis("seed", (1, 2))],
        lambda cell, seed, r: 1.0 / cell.values["scheduler.V"] + seed,
    )
    traces, layout = _titled(_figures(_report(api, study_id)), "mean_latency_s")
    assert layout["xaxis"]["title"]["text"] == "scheduler.V" and layout["xaxis"]["type"] == "log"
    low, high, mean = traces
    assert (low["meta"], high["meta"], high["fill"]) == ({"band": "low"}, {"band": "high"}, "tonexty")
    assert mean["x"] == list(values) and mean["name"] == "all"
    assert all(lo < m < hi for lo, m, hi in zip(low["y"], mean["y"], high["y"], strict=True))
