"""How the run view draws what it draws, on the shared finished runs: the segment heatmap's colours,
memory in the units of the tiles, one capacity line per capacity and readable logarithmic axes. The
deployment does not matter to any of it: embedded only."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import FinishedRuns, Login, screenshot
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]

BYTE_LABEL = re.compile(r"^\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)$")

# the colour the heatmap gives 0 TEBs and all of them, as plotly.js resolved its colour scale
HEATMAP_COLOURS = """(() => { const t = document.getElementById('chart-segments')._fullData[0];
  const scale = t.reversescale ? t.colorscale.map(([v, c]) => [1 - v, c]).reverse() : t.colorscale;
  return { none: scale[0][1], all: scale[scale.length - 1][1], zmin: t.zmin, zmax: t.zmax }; })()"""

# the tick labels plotly.js drew on the y axis of the per-device subplot ``chart``, and the hover
# texts of that subplot's traces
SUBPLOT_LABELS = """(chart) => { const el = document.querySelector(`[data-charts~="${chart}"]`);
  const index = el.dataset.charts.split(' ').indexOf(chart);
  const axis = index ? `y${index + 1}` : 'y';
  const ticks = [...el.querySelectorAll(`.${axis}tick text`)].map((t) => t.textContent);
  const traces = el.data.filter((t) => t.meta?.chart === chart);
  return { ticks, hover: traces.flatMap((t) => (t.hovertext || []).filter((v) => v)),
           templates: traces.map((t) => t.hovertemplate) }; }"""

# every label of a y axis, and whether two of them overlap, for a perplexity chart drawn through the
# page's own RoundChart with values falling from ``hi`` to ``lo`` over ``n`` rounds (``live``: the
# first two rounds drawn, the others appended as live rounds)
LOG_AXIS = """async ([hi, lo, n, live]) => {
  const { RoundChart, ROUND_CHARTS } = await import('/js/run/round-charts.js');
  const def = ROUND_CHARTS.find((c) => c.id === 'perplexity');
  const chart = new RoundChart(def, 'round');
  const box = document.createElement('div');
  box.style.width = '520px';
  box.append(chart.panel);
  document.querySelector('main').append(box);
  const round = [...Array(n).keys()];
  const value = round.map((r) => hi * (lo / hi) ** (r / (n - 1)));
  const first = live ? 2 : n;
  const drawn = round.slice(0, first);
  chart.draw({ eval_perplexity: { round: drawn, value: value.slice(0, first), elapsed_s: drawn } });
  if (live) {
    for (let r = first; r < n; r += 1) {
      chart.extend([{ round: { round: r, eval_metrics: { eval_perplexity: value[r] } }, elapsed_s: r }]);
    }
  }
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  const labels = [...chart.el.querySelectorAll('.ytick text')]
    .map((t) => ({ text: t.textContent, box: t.getBoundingClientRect() }));
  const boxes = labels.map((l) => l.box).sort((a, b) => a.top - b.top);
  const overlaps = boxes.slice(1).filter((b, i) => b.top < boxes[i].bottom).length;
  chart.destroy();
  box.remove();
  return { labels: labels.map((l) => l.text), overlaps };
}"""


def _luminance(colour: str) -> float:
    if colour.startswith("#"):
        r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    else:
        r, g, b = (float(v) for v in re.findall(r"[\d.]+", colour)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def _open(page: Page, server: Server, run_id: int) -> None:
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)


def test_the_run_views_figures_read_as_the_rest_of_the_page(
    login: Login, server: Server, finished_runs: FinishedRuns
) -> None:
    run_id = finished_runs.baseline
    with server.client() as client:
        params = {"metric": "memory_capacity_bytes", "max_points": 2}
        stored = client.get(f"/api/runs/{run_id}/devices", params=params).raise_for_status().json()
    capacity = {d: s["value"][-1] for d, s in stored["metrics"]["memory_capacity_bytes"]["series"].items()}
    page = login("viewer")
    _open(page, server, run_id)

    # the heatmap: no TEBs is (nearly) white, all of them dark
    colours = page.evaluate(HEATMAP_COLOURS)
    assert colours["zmin"] == 0 and colours["zmax"] == 4, colours
    assert _luminance(colours["none"]) > 0.9 > 0.3 > _luminance(colours["all"]), colours
    # a builtin seq2seq model's TEBs are its encoder's layers
    expect(page.get_by_role("heading", name="Current cut of the encoder")).to_be_visible()

    # memory in the tiles' units: the ticks of the memory subplot and its hover texts
    expect(page.locator("[data-tile='memory']")).to_have_text(BYTE_LABEL)  # the tiles come last
    tile = page.locator("[data-tile='memory']").inner_text()
    unit = tile.split(" ")[-1]
    memory = page.evaluate(SUBPLOT_LABELS, "memory")
    assert len(memory["ticks"]) >= 2 and all(BYTE_LABEL.match(t) for t in memory["ticks"]), memory["ticks"]
    assert {t.split(" ")[1] for t in memory["ticks"]} == {unit}, (memory["ticks"], tile)
    assert memory["hover"] and all(BYTE_LABEL.match(t) for t in memory["hover"]), memory["hover"][:5]
    assert all("%{hovertext}" in t for t in memory["templates"]), memory["templates"]

    # one capacity line per capacity, its hover naming the devices that have it
    limit = page.evaluate(
        """(() => { const t = document.querySelector('[data-charts~="memory"]').data
          .find((d) => d.meta?.chart === 'memory' && d.meta.kind === 'limit');
          return { y: Array.from(t.y), text: Array.from(t.text) }; })()"""
    )
    segments = {
        y: text for y, text in zip(limit["y"], limit["text"], strict=True) if y is not None
    }  # each segment's two ends name the same devices
    assert len(limit["y"]) == 3 * len(set(capacity.values())), limit
    assert segments == {
        value: ", ".join(d for d in sorted(capacity) if capacity[d] == value)
        for value in set(capacity.values())
    }
    page.locator("#chart-devices").scroll_into_view_if_needed()
    screenshot(page, "run-memory-units")

    # a log axis spanning one decade or two labels 1, 2 and 5 of each decade, not every digit; within
    # a decade and across many, plotly.js's own steps; no two labels overlap, drawn at once or live
    for hi, lo, n, live in [(900, 100, 20, False), (3000, 300, 20, False), (5000, 20, 30, False),
                            (60, 20, 30, False), (2000, 1500, 4, False), (3000, 250, 30, True)]:  # fmt: skip
        axis = page.evaluate(LOG_AXIS, [hi, lo, n, live])
        assert axis["overlaps"] == 0 and len(axis["labels"]) >= 2, (hi, lo, live, axis)
