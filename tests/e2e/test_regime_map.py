"""The regime-map preset through the API (its 63 runs cut to a few rounds), then its page: the heatmap
of DSSDA's latency over the best budget holder's renders with every point's value and annotation, and
the HTML report carries the same heatmap. A map whose base and axis values are named with HTML and
``javascript:`` payloads shows them as text on the page and in the report."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server
from tests.e2e.test_hostile_names import IMG, INJECTED, JS, LINK, SCRIPT

pytestmark = pytest.mark.e2e

ROUNDS = 3  # the preset's 10, cut: the map's cells only need a few rounds each


def _launch_preset(server: Server) -> tuple[int, dict[str, Any]]:
    """The regime-map preset as served, with fewer rounds; waits for it; its id and detail."""
    with server.client() as client:
        presets = client.get("/api/studies/presets").raise_for_status().json()
        body = next(p for p in presets if p["name"] == "regime-map")["definition"]
        body["axes"] = [*body["axes"], {"field": "training.rounds", "values": [ROUNDS]}]
    return _launch(server, body)


def _launch(server: Server, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Create the study; wait until every run succeeded; its id and detail."""
    with server.client() as client:
        created = client.post("/api/studies", json=body)
        assert created.status_code == 201, created.text
        study_id = int(created.json()["id"])
        deadline = time.monotonic() + 300
        while True:
            detail: dict[str, Any] = client.get(f"/api/studies/{study_id}").raise_for_status().json()
            status = detail["progress"]["status"]
            if status == "succeeded":
                return study_id, detail
            assert status in ("queued", "running"), f"{detail['progress']}\n{server.log()[-3000:]}"
            assert time.monotonic() < deadline, f"{detail['progress']}\n{server.log()[-3000:]}"
            time.sleep(1.0)


def _report_heatmaps(text: str) -> list[dict[str, Any]]:
    decoder, drawn = json.JSONDecoder(), []
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", text):
        drawn += [t for t in decoder.raw_decode(text, match.end())[0] if t["type"] == "heatmap"]
    return drawn


def _grid(regime: dict[str, Any], key: str) -> list[list[Any]]:
    grid: list[list[Any]] = [[None] * len(regime["x_values"]) for _ in regime["y_values"]]
    for point in regime["points"]:
        grid[point["y"]][point["x"]] = point[key]
    return grid


@pytest.mark.deployments("production")  # warm Celery workers; the backend tests cover the embedded one
def test_the_regime_map_preset_runs_and_its_heatmap_renders_on_the_page_and_in_the_report(
    login: Login, server: Server
) -> None:
    study_id, detail = _launch_preset(server)
    regime = detail["regime_map"]
    assert regime is not None and regime["panels"] == [""] and regime["fixed_batch"] is True
    assert len(regime["points"]) == len(regime["x_values"]) * len(regime["y_values"]) == 9
    assert all(p["devices_holding_blocks"] is not None and p["microbatches"] for p in regime["points"])
    ratios = _grid(regime, "latency_ratio")

    page = login("viewer")
    page.goto(f"{server.url}/#/studies/{study_id}")
    expect(page.locator("#study-page[data-ready='true']")).to_be_attached()
    expect(page.locator("#study-regime-title")).to_have_text("Regime map")
    expect(page.locator("#study-regime-map .chart")).to_have_count(1)
    points = sum(r is not None for row in ratios for r in row)
    expect(page.locator("#study-regime-map")).to_have_attribute("data-points", str(points))
    page.wait_for_function(
        "() => document.querySelector('#study-regime-map .chart')?._fullData?.length === 1"
    )
    traces = page.evaluate(
        "() => document.querySelector('#study-regime-map .chart').data"
        ".map((t) => ({type: t.type, x: t.x, y: t.y, z: t.z, text: t.text}))"
    )
    assert [t["type"] for t in traces] == ["heatmap"]
    heatmap = traces[0]
    assert (heatmap["x"], heatmap["y"]) == (regime["x_labels"], regime["y_labels"])
    assert heatmap["z"] == ratios
    assert heatmap["text"] == _grid(regime, "annotation")
    # drawn, not just handed over: the heatmap's image and one annotation per point
    expect(page.locator("#study-regime-map .heatmaplayer image")).to_have_count(1)
    expect(page.locator("#study-regime-map .heatmaplayer text")).to_have_count(len(regime["points"]))
    expect(page.locator("#study-regime-map .heatmaplayer text").first).to_contain_text("dev · M")
    screenshot(page, "study-regime-map")
    # the figure against an axis names its lines by the other axes' values, a memory range as JSON
    names = page.evaluate(
        "() => document.getElementById('study-plot').data.map((t) => t.name).filter((n) => n)"
    )
    assert names and all("[object Object]" not in n and '"low"' in n for n in names), names

    # the HTML report (this session's cookie) draws the same heatmap
    href = page.locator("a[data-export='html']").get_attribute("href")
    report = page.request.get(f"{server.url}{href}")
    assert report.ok and "<h2>Regime map</h2>" in report.text()
    drawn = _report_heatmaps(report.text())
    assert len(drawn) == 1 and drawn[0]["z"] == ratios and drawn[0]["text"] == heatmap["text"]


@pytest.mark.deployments("production")
def test_names_in_a_regime_map_are_text_on_the_page_and_in_the_report(login: Login, server: Server) -> None:
    config = tiny(rounds=1, executor="analytic")
    bases = [f"{SCRIPT}{IMG}", LINK]  # two bases: one panel each, titled with its name
    body = {
        "name": "regime map of payloads",
        "bases": [{"name": name, "config": config} for name in bases],
        "axes": [
            {"field": "scheduler.policy", "values": ["dssda", "uniform"]},
            {"field": "name", "values": [IMG, JS]},
            {"field": "scheduler.V", "values": [1]},
        ],
        "regime_map": {"x": "name", "y": "scheduler.V"},
    }
    study_id, detail = _launch(server, body)
    assert (detail["regime_map"]["x_labels"], detail["regime_map"]["panels"]) == ([IMG, JS], bases)

    page = login("viewer")
    page.goto(f"{server.url}/#/studies/{study_id}")
    expect(page.locator("#study-page[data-ready='true']")).to_be_attached()
    expect(page.locator("#study-regime-map")).to_have_attribute("data-points", "4")
    charts = page.locator("#study-regime-map .chart")
    expect(charts).to_have_count(2)
    for i, name in enumerate(bases):  # shown as text, not made into elements
        expect(charts.nth(i).locator(".gtitle")).to_have_text(name)
        assert charts.nth(i).locator(".xtick text").all_text_contents() == [IMG, JS]
    assert page.evaluate(INJECTED) == []

    href = page.locator("a[data-export='html']").get_attribute("href")
    report = page.request.get(f"{server.url}{href}")
    heatmaps = _report_heatmaps(report.text())
    assert [h["x"] for h in heatmaps] == [['&lt;img src=x onerror="window.__xss=1"&gt;', JS]] * 2
    opened = page.context.new_page()
    opened.set_content(report.text())  # as opened from a file (plotly.js is inlined)
    expect(opened.locator(".heatmaplayer image")).to_have_count(2)
    titles = opened.locator(".gtitle").all_text_contents()
    assert all(any(name in title for title in titles) for name in bases), titles
    assert opened.evaluate(INJECTED) == []
    opened.close()
