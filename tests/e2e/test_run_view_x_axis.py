"""The run view's X axis: every curve against the round or against the modeled elapsed time (Σ
latency_s of the rounds up to a point's), for the history and for live rounds alike."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, counted_api_requests, screenshot
from tests.e2e.server import Server

# one deployment: the charts' x axis is the page's (live rounds over Redis: test_launch on production)
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]

ROUNDS = 40

# the round latency chart's latency_s trace, and one device's trace of a per-device chart, with
# their figure's x axis title
ROUND_LATENCY = """() => {
  const el = document.getElementById('chart-round-latency');
  const { x, y, customdata } = el.data[0];
  return { x, y, customdata, title: el.layout.xaxis.title.text };
}"""
FIRST_DEVICE = """(chart) => {
  const el = document.querySelector(`[data-charts~="${chart}"]`);
  const trace = el.data.find(t => t.meta?.chart === chart && t.meta.device === 'c0-d0');
  return { x: trace.x, customdata: trace.customdata, title: el.layout.xaxis.title.text };
}"""

# where round ``round`` of the first device is drawn on the queue subplot (found by its customdata,
# the round), in the window
POINT_OF_ROUND = """(round) => {
  const el = document.querySelector('[data-charts~="queue"]');
  const index = el.data.findIndex(t => t.meta?.chart === 'queue' && t.meta.device);
  const trace = el.data[index];
  const i = trace.customdata.indexOf(round);
  const xa = el._fullLayout.xaxis;
  const ya = el._fullLayout[el._fullData[index].yaxis.replace('y', 'yaxis')];
  const box = el.getBoundingClientRect();
  return { x: box.left + xa._offset + xa.l2p(trace.x[i]), y: box.top + ya._offset + ya.l2p(trace.y[i]) };
}"""


def _stored(server: Server, run_id: int) -> tuple[dict[str, Any], list[float]]:
    """The run's latency_s series from the API, and the cumulative sum of its values recomputed here."""
    with server.client() as client:
        params = {"fields": "latency_s", "method": "none"}
        body = client.get(f"/api/runs/{run_id}/rounds", params=params).raise_for_status().json()
    latency: dict[str, Any] = body["series"]["latency_s"]
    assert latency["round"] == list(range(ROUNDS))
    return latency, list(itertools.accumulate(latency["value"]))


def _wait_all_drawn(page: Page) -> None:
    """Every round on the round latency chart and on both per-device figures (one is off screen: it
    catches up when the page is idle)."""
    for chart in ("queue", "power"):
        page.wait_for_function(f"() => ({FIRST_DEVICE})('{chart}').x.length === {ROUNDS}", timeout=30_000)
    page.wait_for_function(f"() => ({ROUND_LATENCY})().x.length === {ROUNDS}", timeout=30_000)


def test_curves_follow_the_modeled_clock_live_and_after_a_reload(login: Login, server: Server) -> None:
    run_id = server.launch(tiny(rounds=ROUNDS), name="against modeled time")
    page = login("viewer")
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    requests = counted_api_requests(page)  # the tiles, the Gantt and the detail still ask theirs

    # switched while the run is running: the history drawn so far moves, live rounds follow
    page.get_by_label("X axis").select_option(label="modeled time (s)")
    draws = f"window.collapipeStats.draws.filter(d => d.runId === {run_id}).length"
    at_switch = page.evaluate(draws)
    assert page.evaluate(ROUND_LATENCY)["title"] == "modeled elapsed time (s)"
    server.wait_for_run(run_id, ("succeeded",), timeout_s=120)
    _wait_all_drawn(page)
    assert page.evaluate(draws) > at_switch, "no round arrived live after the switch"
    series = [url for url in requests if "/rounds" in url or "/devices" in url]
    assert series == [], "switching the axis asked the API for the series again"

    latency, clock = _stored(server, run_id)
    shown = page.evaluate(ROUND_LATENCY)
    assert shown["x"] == pytest.approx(clock) and shown["y"] == pytest.approx(latency["value"])
    assert shown["customdata"] == list(range(ROUNDS))  # hover names each point's round
    for chart in ("queue", "power"):
        device = page.evaluate(FIRST_DEVICE, chart)
        assert device["title"] == "modeled elapsed time (s)", chart
        assert device["customdata"] == list(range(ROUNDS)), chart
        assert device["x"] == pytest.approx(clock), chart
    screenshot(page, "run-against-modeled-time")

    # the choice is kept; the history's elapsed time is the API's (the /rounds answer)
    page.reload()
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    expect(page.get_by_label("X axis")).to_have_value("elapsed_s")
    _wait_all_drawn(page)
    assert page.evaluate(ROUND_LATENCY)["x"] == pytest.approx(latency["elapsed_s"])
    assert latency["elapsed_s"] == pytest.approx(clock)
    assert page.evaluate(FIRST_DEVICE, "queue")["x"] == pytest.approx(clock)

    # a point clicked on the time axis opens its round in the Gantt
    point = page.evaluate(POINT_OF_ROUND, 5)
    page.evaluate("(dy) => window.scrollBy(0, dy)", point["y"] - 500)  # the point in the middle of the window
    page.wait_for_timeout(300)  # plotly's hover layer has caught up with the scroll
    point = page.evaluate(POINT_OF_ROUND, 5)
    page.mouse.move(point["x"], point["y"])
    page.mouse.click(point["x"], point["y"])
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "5")

    # and back: rounds on x, the elapsed time kept for hover
    page.get_by_label("X axis").select_option(label="round")
    shown = page.evaluate(ROUND_LATENCY)
    assert shown["title"] == "round" and shown["x"] == list(range(ROUNDS))
    assert shown["customdata"] == pytest.approx(clock)
    assert page.evaluate(FIRST_DEVICE, "power")["x"] == list(range(ROUNDS))
