"""The run view: the Gantt of a chosen round, cancelling a running run, a narrow window, and the
requests it loads with."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Dialog, Route, expect

from tests.e2e.configs import tiny
from tests.e2e.conftest import FinishedRuns, Login, counted_api_requests, screenshot
from tests.e2e.server import Server

# one deployment: the run page's own behaviour on stored and live rounds (the API reads both
# databases alike, tests/backend); cancelling runs on both
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]


def test_open_the_gantt_of_a_round(login: Login, server: Server, finished_runs: FinishedRuns) -> None:
    run_id = finished_runs.baseline
    page = login("viewer")
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)

    gantt = page.locator("#gantt")
    gantt.get_by_label("Round", exact=True).fill("3")
    gantt.get_by_label("Cluster").select_option("1")
    gantt.get_by_role("button", name="Show timeline").click()
    # a timeline is simulated on request: seconds on a server busy with other tests' runs
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "3", timeout=30_000)
    expect(gantt).to_contain_text("Round 3, cluster 1")
    kinds = page.evaluate("document.getElementById('chart-gantt').data.map(t => [t.name, t.x.length])")
    drawn = {name for name, count in kinds if count > 0}
    assert drawn >= {"forward", "backward", "send", "receive", "redistribution"}, kinds
    # the redistribution phase (the averaged model, then each device's segment) ends where the first
    # iteration starts: at the dotted line
    phase_end, first_start, line = page.evaluate(
        """(() => { const el = document.getElementById('chart-gantt');
        const r = el.data.find(t => t.name === 'redistribution');
        const p = el.data.filter(t => t.name !== 'redistribution' && t.base.length);
        return [Math.max(...r.base.map((b, i) => b + r.x[i])), Math.min(...p.flatMap(t => t.base)),
                el.layout.shapes[0].x0]; })()"""
    )
    assert phase_end == pytest.approx(first_start) and line == pytest.approx(first_start) and line > 0
    expect(gantt).to_contain_text("redistribution")
    participants = page.evaluate(
        "[...new Set(document.getElementById('chart-gantt').data.flatMap(t => t.y))]"
    )
    assert {"cu", "edge", "c1-d0"} <= set(participants), participants
    page.locator("#gantt").scroll_into_view_if_needed()
    screenshot(page, "run-gantt-round-3")

    # a round that is not stored gets the API's message, not a blank chart
    gantt.get_by_label("Round", exact=True).fill("99")
    gantt.get_by_role("button", name="Show timeline").click()
    expect(gantt).to_contain_text("has no stored round 99")


def test_a_suggested_round_answered_late_does_not_replace_the_one_the_user_chose(
    login: Login, server: Server, finished_runs: FinishedRuns
) -> None:
    page = login("viewer")
    held: list[Route] = []

    def hold_the_first(route: Route) -> None:  # the page's own suggestion: the newest round
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(re.compile(r"/api/runs/\d+/timeline\?"), hold_the_first)
    page.goto(f"{server.url}/#/runs/{finished_runs.baseline}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    gantt = page.locator("#gantt")
    expect(gantt).to_contain_text("Loading round 7")  # the suggestion is asked for and held
    for _ in range(100):  # the route's handler runs once Playwright reads the page's events
        if held:
            break
        page.wait_for_timeout(100)
    assert len(held) == 1 and "round=7" in held[0].request.url

    gantt.get_by_label("Round", exact=True).fill("3")
    gantt.get_by_role("button", name="Show timeline").click()
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "3", timeout=30_000)
    with page.expect_response(re.compile(r"timeline\?round=7")):
        held[0].continue_()
    page.wait_for_timeout(300)  # the late answer has been read and dropped
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "3")
    expect(gantt).to_contain_text("Round 3, cluster 0")


# where round 5 of the first device is drawn on a per-device chart (a subplot), in the window
POINT_POSITION = """(chart) => {
  const el = document.querySelector(`[data-charts~="${chart}"]`);
  const index = el.data.findIndex(t => t.meta?.chart === chart && t.meta.device);
  const trace = el.data[index];
  const i = trace.x.indexOf(5);
  const full = el._fullLayout;
  const xa = full.xaxis;
  const ya = full[el._fullData[index].yaxis.replace('y', 'yaxis')];
  const box = el.getBoundingClientRect();
  return { x: box.left + xa._offset + xa.l2p(trace.x[i]), y: box.top + ya._offset + ya.l2p(trace.y[i]) };
}"""


@pytest.mark.parametrize("chart", ["queue", "power"])
def test_clicking_a_point_of_a_per_device_chart_opens_its_round_in_the_gantt(
    login: Login, server: Server, finished_runs: FinishedRuns, chart: str
) -> None:
    page = login("viewer")
    page.goto(f"{server.url}/#/runs/{finished_runs.baseline}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    point = page.evaluate(POINT_POSITION, chart)
    page.evaluate("(dy) => window.scrollBy(0, dy)", point["y"] - 500)  # the point in the middle of the window
    page.wait_for_timeout(300)  # plotly's hover layer has caught up with the scroll
    point = page.evaluate(POINT_POSITION, chart)
    assert 0 < point["y"] < 1000, point
    page.mouse.move(point["x"], point["y"])
    page.mouse.click(point["x"], point["y"])
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "5")
    expect(page.locator("#gantt")).to_contain_text("Round 5")


# a local process and a Celery task are cancelled differently: both
@pytest.mark.deployments("embedded", "production")
def test_cancel_a_running_run(login: Login, server: Server) -> None:
    page = login("operator")
    # the operator's own run (only its owner or an admin may cancel it), launched with their session
    launched = page.request.post(
        f"{server.url}/api/runs",
        data={"config": tiny(rounds=5000), "name": "to cancel"},
        headers={"X-CollaPipe": "1"},
    )
    assert launched.status == 201, launched.text()
    run_id = launched.json()["id"]
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator(".page-head .status")).to_have_text("running", timeout=30_000)
    page.wait_for_function(
        f"() => window.collapipeStats.draws.some(d => d.runId === {run_id})", timeout=30_000
    )

    # cancel asks first: dismissed, nothing is sent; accepted, the run is cancelled
    questions: list[str] = []

    def answer(dialog: Dialog) -> None:
        questions.append(dialog.message)
        if len(questions) == 1:
            dialog.dismiss()
        else:
            dialog.accept()

    page.on("dialog", answer)
    cancels = counted_api_requests(page)
    page.get_by_role("button", name=f"Cancel run {run_id}").click()
    assert questions == [
        f"Cancel run {run_id} (to cancel)? It stops after the round in progress; the rounds done are kept, "
        "and Resume continues it."
    ]
    page.wait_for_timeout(300)  # a request the click sent would be on its way
    assert not [url for url in cancels if url.endswith("/cancel")], cancels
    with server.client() as client:
        assert client.get(f"/api/runs/{run_id}").json()["cancel_requested"] is False
    expect(page.locator(".page-head .status")).to_have_text("running")
    page.get_by_role("button", name=f"Cancel run {run_id}").click()
    assert len(questions) == 2
    expect(page.locator(".page-head .status")).to_have_text("cancelled", timeout=30_000)
    expect(page.get_by_role("button", name=f"Resume run {run_id}")).to_be_visible()
    run = server.wait_for_run(run_id, ("cancelled",))
    assert 0 < run["rounds_done"] < 5000
    screenshot(page, "run-cancelled")

    page.goto(f"{server.url}/#/runs")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    expect(row.locator(".status")).to_have_text("cancelled")
    page.get_by_label("Status").select_option("cancelled")
    with server.client() as client:  # other tests of the session may have cancelled runs too
        cancelled = client.get("/api/runs", params={"status": "cancelled", "limit": 100}).json()
    assert run_id in [r["id"] for r in cancelled["items"]]
    expect(page.locator("tbody tr[data-run-id]")).to_have_count(cancelled["total"])
    expect(page.locator("tbody tr[data-run-id] .status").filter(has_not_text="cancelled")).to_have_count(0)
    screenshot(page, "runs-filtered-cancelled")


def test_run_view_fits_a_narrow_window(login: Login, server: Server, finished_runs: FinishedRuns) -> None:
    run_id = finished_runs.other
    page = login("viewer", width=420, height=900)
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the page is {overflow}px wider than the window"
    screenshot(page, "run-narrow-window")


@pytest.mark.parametrize(
    ("module", "bound"),
    [("/js/plot.js", "MAX_TRACE_POINTS"), ("/js/run/device-charts.js", "DEVICE_SERIES_POINTS")],
)
def test_long_live_series_stay_bounded_and_keep_the_newest_rounds(
    login: Login, module: str, bound: str
) -> None:
    """A series fed round after round is thinned in its older part only: the newest rounds are all
    there, a spike in the older part survives, and no trace grows past the bound (the round charts'
    and the per-device series' own)."""
    page = login("viewer")
    result = page.evaluate(
        """async ([module, bound]) => {
          const { thinTrace } = await import('/js/plot.js');
          const max = (await import(module))[bound];
          const trace = { x: [], y: [] };
          let longest = 0;
          for (let round = 0; round < 5000; round += 1) {
            thinTrace(trace, 1, max);
            trace.x.push(round);
            trace.y.push(round === 1234 ? 1e6 : Math.sin(round / 50));
            longest = Math.max(longest, trace.x.length);
          }
          const sorted = trace.x.every((x, i) => i === 0 || x > trace.x[i - 1]);
          const spike = trace.y.includes(1e6);
          const empty = { x: [], y: [] };
          thinTrace(empty, 5000, max);  // a big batch for a series that has no points yet
          return { longest, max, tail: trace.x.slice(-200), spike, sorted, first: trace.x[0], empty };
        }""",
        [module, bound],
    )
    assert isinstance(result["max"], int) and result["max"] >= 300, result["max"]
    assert result["longest"] <= result["max"], result["longest"]
    assert result["tail"] == list(range(4800, 5000))
    assert result["spike"], "the spike in the older part was thinned away"
    assert result["first"] == 0, "the start of the series was thinned away"
    assert result["empty"] == {"x": [], "y": []}
    assert result["sorted"]


# every device's points on a subplot drawn with a trace per cluster: the points each trace's ``text``
# names the device of, and the traces' shape (meta, the null gaps between devices)
CLUSTER_TRACES = """(chart) => {
  const el = document.querySelector(`[data-charts~="${chart}"]`);
  const traces = el.data.filter(t => t.meta?.chart === chart && (t.meta.device || t.meta.devices));
  const series = {};
  const gapsMatch = traces.every(t => t.x.every((x, i) => (x === null) === (t.text[i] === null)));
  for (const t of traces) {
    t.text.forEach((device, i) => {
      if (device === null) return;
      series[device] = series[device] || { round: [], value: [] };
      series[device].round.push(t.x[i]);
      series[device].value.push(t.y[i]);
    });
  }
  return { series, gapsMatch, meta: traces.map(t => t.meta), hover: traces.map(t => t.hovertemplate) };
}"""


# where a device's point of a round is drawn on the queue subplot's trace of its cluster, in the window
CLUSTER_POINT = """([cluster, device, round]) => {
  const el = document.querySelector('[data-charts~="queue"]');
  const index = el.data.findIndex(t => t.meta?.chart === 'queue' && t.meta.cluster === cluster);
  const trace = el.data[index];
  const i = trace.text.findIndex((d, j) => d === device && trace.x[j] === round);
  const xa = el._fullLayout.xaxis;
  const ya = el._fullLayout[el._fullData[index].yaxis.replace('y', 'yaxis')];
  const box = el.getBoundingClientRect();
  return { x: box.left + xa._offset + xa.l2p(round), y: box.top + ya._offset + ya.l2p(trace.y[i]) };
}"""


def _cluster_traces_match_the_store(page, server: Server, run_id: int, rounds: int) -> None:
    with server.client() as client:
        for chart, metric in (("queue", "queue"), ("power", "power_w")):
            params = {"metric": metric, "max_points": 1000}
            answer = client.get(f"/api/runs/{run_id}/devices", params=params).raise_for_status().json()
            stored = answer["metrics"][metric]
            shown = page.evaluate(CLUSTER_TRACES, chart)
            # one trace per cluster (3 × 4 devices), its meta listing the cluster's devices
            assert sorted(m["cluster"] for m in shown["meta"]) == ["c0", "c1", "c2"], shown["meta"]
            for meta in shown["meta"]:
                assert meta["devices"] == [f"{meta['cluster']}-d{k}" for k in range(4)], meta
            assert shown["gapsMatch"], "a null gap is not where one device's line ends"
            assert all("%{text}" in h for h in shown["hover"]), shown["hover"]
            series = shown["series"]
            assert sorted(series) == sorted(stored["series"]) and len(series) == 12
            for device, points in stored["series"].items():
                assert series[device]["round"] == points["round"] == list(range(rounds)), (chart, device)
                assert series[device]["value"] == pytest.approx(points["value"]), (chart, device)


def test_many_devices_are_drawn_as_a_line_each_in_a_trace_per_cluster(login: Login, server: Server) -> None:
    """Above 8 devices a subplot draws a trace per cluster: live rounds still reach every device's
    line without a reload, the lines are the stored records, and a click on one opens its round."""
    config = tiny(rounds=30)
    config["network"]["num_clusters"] = 3
    config["network"]["devices_per_cluster"] = 4
    page = login("viewer")
    run_id = server.launch(config, name="twelve devices")
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    page.evaluate("window.__sameDocument = true")
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=60_000)
    page.wait_for_function(
        "() => "
        "document.querySelector('[data-charts~=\"power\"]').data"
        ".filter(t => t.meta?.chart === 'power' && t.meta.devices)"
        ".reduce((n, t) => n + t.text.filter(d => d !== null).length, 0) === 12 * 30",
        timeout=30_000,
    )
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    draws = page.evaluate(f"window.collapipeStats.draws.filter(d => d.runId === {run_id}).length")
    assert draws >= 1, "no round arrived through the live stream"
    _cluster_traces_match_the_store(page, server, run_id, 30)
    screenshot(page, "run-twelve-devices-live")

    # the finished run, drawn from its (downsampled) history
    page.reload()
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    _cluster_traces_match_the_store(page, server, run_id, 30)

    # a point of one device's line opens its round in the Gantt
    point = page.evaluate(CLUSTER_POINT, ["c1", "c1-d2", 7])
    page.evaluate("(dy) => window.scrollBy(0, dy)", point["y"] - 500)  # the point in the middle of the window
    page.wait_for_timeout(300)  # plotly's hover layer has caught up with the scroll
    xy = page.evaluate(CLUSTER_POINT, ["c1", "c1-d2", 7])
    assert 0 < xy["y"] < 1000, xy
    page.mouse.move(xy["x"], xy["y"])
    page.mouse.click(xy["x"], xy["y"])
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "7")


def test_the_run_view_loads_in_six_requests(login: Login, server: Server) -> None:
    """A network of 18 devices (it opens on cluster 0, the segment heatmap shows all): the detail,
    the per-device series (one request for every metric), the round series, the decision log, the
    tiles' figures and the Gantt — every figure drawn from them."""
    config = tiny(rounds=8, executor="analytic")
    config["network"]["num_clusters"] = 3
    config["network"]["devices_per_cluster"] = 6
    run_id = server.launch(config, name="eighteen devices")
    server.wait_for_run(run_id, ("succeeded",))
    page = login("viewer")
    expect(page.locator("tbody tr[data-run-id]").first).to_be_attached()
    requests = counted_api_requests(page)
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    expect(page.locator("#chart-gantt")).to_have_attribute("data-round", "7")
    expect(page.locator("[data-tile='latency']")).not_to_have_text("—")
    page.wait_for_load_state("networkidle")
    assert len(requests) <= 6, requests
    # the figures: cluster 0's devices on the per-device charts, every device on the heatmap, the
    # round curves, the current cut, the decision log's newest page
    for chart in ("queue", "power"):
        shown = page.evaluate(CLUSTER_TRACES, chart)["series"]
        assert sorted(shown) == [f"c0-d{k}" for k in range(6)], chart
        assert all(points["round"] == list(range(8)) for points in shown.values()), chart
    heatmap = page.evaluate("document.getElementById('chart-segments').data[0]")
    assert len(heatmap["y"]) == 18 and heatmap["x"] == list(range(8))
    assert all(len(row) == 8 for row in heatmap["z"])
    assert page.evaluate("document.getElementById('chart-round-latency').data[0].x.length") == 8
    assert page.evaluate("document.getElementById('chart-cut').data.length") == 6
    expect(page.locator("#decisions tbody tr[data-round]")).to_have_count(8)
    expect(page.locator("#decisions tbody tr[data-round='7'] td").nth(3)).not_to_have_text("—")  # V·T
    # the uniform policy keeps its segments: no block moves, no latency for them
    expect(page.locator("#decisions tbody tr[data-round='7'] td").nth(7)).to_have_text("0 (0.0 %)")
    screenshot(page, "run-eighteen-devices")
