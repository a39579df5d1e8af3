"""The study page: launch the V-sweep preset (at fewer rounds), watch its progress arrive live, the
summary table (mean ± 95 % interval per cell, ratios to a chosen baseline), the figure with its
interval bands and the round series per cell fill in, and the exports answer (with the chosen target
eval loss; the HTML report opens with no outside request)."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

# one deployment: a study's runs on Celery workers; tests/backend covers the local runner
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("production")]

ROUNDS = 3  # the preset's 100 rounds, cut


def test_launch_the_v_sweep_preset_and_watch_it_fill_in(login: Login, server: Server) -> None:
    with server.client() as client:
        presets = client.get("/api/studies/presets").raise_for_status().json()
    v_sweep = next(p for p in presets if p["name"] == "v-sweep")
    values = next(a["values"] for a in v_sweep["definition"]["axes"] if a["field"] == "scheduler.V")
    seeds = next(a["values"] for a in v_sweep["definition"]["axes"] if a["field"] == "seed")
    num_runs = len(values) * len(seeds)

    page = login("operator")
    page.get_by_role("link", name="Studies").click()
    expect(page.get_by_role("heading", name="Studies", exact=True)).to_be_visible()
    page.get_by_label("Preset").select_option("v-sweep")
    page.get_by_label("Rounds per run").fill(str(ROUNDS))
    page.get_by_role("button", name="Launch study").click()
    # the whole study is checked before anything is stored: every run's config, on a busy machine
    expect(page).to_have_url(re.compile(r"#/studies/\d+$"), timeout=60_000)
    study_id = int(page.url.rsplit("/", 1)[1])
    page.evaluate("window.__sameDocument = true")

    # progress arrives over the study's event stream, without reloading the page
    progress = page.locator("#study-progress")
    expect(progress).to_have_attribute("data-runs-total", str(num_runs))
    seen: set[tuple[str | None, str | None]] = set()
    deadline = time.monotonic() + 240
    while progress.get_attribute("data-status") != "succeeded":
        seen.add((progress.get_attribute("data-runs-done"), progress.get_attribute("data-rounds-done")))
        assert time.monotonic() < deadline, f"study {study_id} did not finish: {seen}\n{server.log()[-3000:]}"
        assert progress.get_attribute("data-status") not in ("failed", "cancelled")
        time.sleep(0.2)
    assert len(seen) >= 2, f"the progress did not move while watched: {seen}"
    expect(progress).to_have_attribute("data-runs-done", str(num_runs))
    assert page.evaluate("window.__sameDocument") is True

    # the table: one row per V, every mean latency with its interval; the preset's baseline V = 100
    rows = page.locator("#study-table tbody tr")
    expect(rows).to_have_count(len(values))
    latency = page.locator("#study-table td[data-metric='mean_latency_s']")
    expect(latency.filter(has_text="±")).to_have_count(len(values))
    baseline_row = page.locator("#study-table tr:has(.pill)")
    expect(baseline_row).to_have_count(1)
    expect(baseline_row.locator("th")).to_contain_text("100")
    expect(page.locator("#study-table [data-ratio]").first).to_be_attached()

    # choosing another baseline cell moves the ratios
    page.get_by_label("Baseline cell").select_option(rows.first.get_attribute("data-cell"))
    expect(rows.first.locator(".pill")).to_have_text("baseline")
    expect(rows.first.locator("[data-ratio]")).to_have_count(0)

    # the figure: mean latency against V, one mean per V and its interval as a band
    plot = page.locator("#study-plot")
    expect(plot).to_have_attribute("data-points", str(len(values)))
    expect(page.get_by_label("Against", exact=True)).to_have_value("scheduler.V")
    bands = page.evaluate(
        "(() => { const d = document.getElementById('study-plot').data;"
        " const low = d.find(t => t.meta?.band === 'low').y, mean = d.find(t => t.meta?.mean).y,"
        " high = d.find(t => t.meta?.band === 'high').y;"
        " return mean.map((m, i) => [low[i], m, high[i]]); })()"
    )
    assert len(bands) == len(values)
    assert all(low <= mean <= high and low < high for low, mean, high in bands), bands
    page.get_by_label("Figure", exact=True).select_option("mean_backlog")
    expect(plot).to_have_attribute("data-points", str(len(values)))
    screenshot(page, "study-v-sweep")

    # the round series per cell: one line per cell (per V), latency_s by default (the preset's runs
    # are analytic: no eval loss), against the round, then against the modeled time
    series_plot = page.locator("#study-series-plot")
    expect(page.get_by_label("Field", exact=True)).to_have_value("latency_s")
    expect(series_plot).to_have_attribute("data-traces", str(len(values)))
    expect(series_plot).to_have_attribute("data-points", str(len(values) * ROUNDS))
    traces = "document.getElementById('study-series-plot').data.map(t => [t.name, t.x])"
    by_round = page.evaluate(traces)
    assert all(x == list(range(ROUNDS)) for _, x in by_round), by_round
    page.get_by_label("X axis", exact=True).select_option("elapsed")
    expect(series_plot).to_have_attribute("data-x", "elapsed")
    with server.client() as client:
        params: dict[str, str | int] = {"field": "latency_s", "x": "elapsed", "max_points": 500}
        answer = client.get(f"/api/studies/{study_id}/series", params=params).raise_for_status().json()
    expected = [[cell["label"], cell["elapsed_s"]] for cell in answer["cells"]]
    assert len(expected) == len(values) and all(len(x) == ROUNDS for _, x in expected)
    assert page.evaluate(traces) == expected
    assert [x for _, x in expected] != [x for _, x in by_round]
    screenshot(page, "study-v-sweep-series")

    # the preset's runs are analytic: they train nothing, so no target eval loss is asked for
    expect(page.get_by_label("Target eval loss")).to_be_hidden()

    # the exports answer, with this session's cookie
    csv_href = page.locator("a[data-export='csv']").get_attribute("href")
    assert csv_href is not None and "baseline_cell=" in csv_href
    csv = page.request.get(f"{server.url}{csv_href}")
    assert csv.ok and "mean_latency_s" in csv.text().splitlines()[0]
    assert len(csv.text().strip().splitlines()) == 1 + len(values)
    parquet = page.request.get(f"{server.url}{page.locator('a[data-export=parquet]').get_attribute('href')}")
    assert parquet.ok and parquet.body()[:4] == b"PAR1"
    html_href = page.locator("a[data-export='html']").get_attribute("href")
    html = page.request.get(f"{server.url}{html_href}")
    assert html.ok and html.headers["content-type"].startswith("text/html")
    report = page.context.new_page()
    report.set_content(html.text())  # opened from a file: plotly.js is inlined
    expect(report.locator(".js-plotly-plot").first).to_be_visible()
    report.close()  # the context's guard checks that the report sent nothing to another host

    # a viewer reads the study but sees no launch or study control
    viewer = login("viewer")
    viewer.goto(f"{server.url}/#/studies")
    expect(viewer.locator(f"tr[data-study-id='{study_id}']")).to_be_visible()
    expect(viewer.locator("#study-launch")).to_have_count(0)
    viewer.goto(f"{server.url}/#/studies/{study_id}")
    expect(viewer.locator("#study-page[data-ready='true']")).to_be_attached()
    expect(viewer.locator("[data-action]")).to_have_count(0)
