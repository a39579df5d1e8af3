"""The run view of a running run, opened as a user opens it after launching: the segment heatmap,
the current cut and the Gantt follow the live rounds without a reload, wherever the page is
scrolled.

The rounds come from a finished run replayed to the page (live_replay.py): the page asks for what it
asks of a running run, and the test lets the rounds out a few at a time, so every step is
deterministic. The deployment does not matter to what is tested here: embedded only.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import FinishedRuns, Login, screenshot
from tests.e2e.live_replay import LiveReplay
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]

HEATMAP = """(() => { const el = document.getElementById('chart-segments'); const t = el.data[0];
  return { x: Array.from(t.x), y: Array.from(t.y), z: t.z.map(r => Array.from(r)),
           top: el.getBoundingClientRect().top, height: innerHeight, scrolled: scrollY }; })()"""


def _drawn(page: Page, round_index: int, timeout_s: float = 30.0) -> None:
    """Wait until the page drew live round ``round_index`` (polled: the page's CSP forbids the string
    evaluation wait_for_function polls with)."""
    deadline = time.monotonic() + timeout_s
    while round_index not in page.evaluate("window.collapipeStats.draws.map(d => d.round)"):
        assert time.monotonic() < deadline, f"round {round_index} was not drawn"
        page.wait_for_timeout(100)


def _heatmap_columns(page: Page, rounds: int, timeout_s: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while len((shown := page.evaluate(HEATMAP))["x"]) != rounds:
        assert time.monotonic() < deadline, f"the heatmap shows rounds {shown['x']}, not 0 … {rounds - 1}"
        page.wait_for_timeout(100)
    return shown


def test_live_rounds_reach_the_heatmap_the_cut_and_the_gantt_without_a_reload(
    login: Login, server: Server, finished_runs: FinishedRuns
) -> None:
    run_id = finished_runs.baseline
    with server.client() as client:
        params = {"metric": "num_blocks", "max_points": 1000}
        stored = client.get(f"/api/runs/{run_id}/devices", params=params).raise_for_status().json()
    blocks = {device: s["value"] for device, s in stored["metrics"]["num_blocks"]["series"].items()}
    page = login("viewer")
    replay = LiveReplay.open(page, server, run_id, from_round=0)  # opened before its first round
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    shown = page.evaluate(HEATMAP)
    assert shown["x"] == [] and shown["top"] > shown["height"], shown  # below the window, as it opens
    gantt = page.locator("#chart-gantt")
    box = page.locator("#gantt").get_by_label("Round", exact=True)

    replay.release(0)
    _drawn(page, 0)
    expect(gantt).to_have_attribute("data-round", "0", timeout=15_000)

    replay.release(4)
    _drawn(page, 4)
    # the Gantt follows the run: its plot is the round its box says, the newest
    expect(gantt).to_have_attribute("data-round", "4", timeout=15_000)
    expect(box).to_have_value("4")
    # the heatmap and the cut are brought up to date although nobody scrolled to them
    shown = _heatmap_columns(page, 5)
    assert shown["scrolled"] == 0
    assert shown["x"] == [0, 1, 2, 3, 4]
    assert {device: row for device, row in zip(shown["y"], shown["z"], strict=True)} == {
        device: values[:5] for device, values in blocks.items()
    }
    expect(page.locator("#chart-cut").locator("xpath=..")).to_contain_text("in round 4")
    cut = page.evaluate("document.getElementById('chart-cut').data.map(t => Array.from(t.x))")
    assert [sum(column) for column in zip(*cut, strict=True)] == [4, 4]  # every TEB of both clusters
    expect(page.locator("[data-tile='rounds']")).to_have_text("5 / 8")
    screenshot(page, "run-live-round-4")

    replay.release()  # the rest, and the run's end
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=15_000)
    expect(gantt).to_have_attribute("data-round", "7", timeout=15_000)
    expect(box).to_have_value("7")
    assert _heatmap_columns(page, 8)["x"] == list(range(8))
    expect(page.locator("#chart-cut").locator("xpath=..")).to_contain_text("in round 7")
