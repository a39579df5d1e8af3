"""Compare: pick two runs and a baseline, see the ratio table and overlaid curves, export CSV."""

from __future__ import annotations

import csv
import io

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import FinishedRuns, Login, screenshot
from tests.e2e.server import Server

# one deployment: the compare page reads stored rounds: one deployment
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]


def test_compare_two_runs_against_a_baseline(
    login: Login, server: Server, finished_runs: FinishedRuns
) -> None:
    first, second = finished_runs.baseline, finished_runs.other
    page = login("viewer")
    page.get_by_role("link", name="Compare", exact=True).click()
    page.get_by_label(f"Compare run {first} ").check()
    page.get_by_label(f"Compare run {second} ").check()
    page.get_by_label("Baseline").select_option(str(first))
    page.get_by_role("button", name="Compare", exact=True).click()

    table = page.locator("#compare-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator(f"tr[data-run-id='{first}']")).to_contain_text("baseline")
    expect(table.locator(f"tr[data-run-id='{second}']")).to_contain_text("×")
    expect(page.locator("[data-chart='compare-latency_s']")).to_be_visible()
    page.wait_for_function(
        "() => document.querySelector(\"[data-chart='compare-latency_s']\").data?.length === 2"
    )
    screenshot(page, "compare-two-runs")

    with page.expect_download() as download:
        page.get_by_role("button", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert [int(r["run_id"]) for r in rows] == [first, second]
    assert float(rows[0]["mean_latency_s_ratio"]) == 1.0
    with server.client() as client:
        api = client.get("/api/compare", params={"run_ids": f"{first},{second}", "baseline": first}).json()
    assert float(rows[1]["mean_latency_s_ratio"]) == pytest.approx(api["runs"][1]["ratios"]["mean_latency_s"])
