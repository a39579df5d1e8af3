"""Compare with a target eval loss: the table's "Time to target" column (modeled seconds and rounds,
ratio to the baseline) is the API's, a target that is not a loss gets the API's reason, and the
overlaid curves can be drawn against the modeled elapsed time."""

from __future__ import annotations

import itertools
import re

import pytest
from playwright.sync_api import expect

from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

# one deployment: the compare page reads stored rounds: one deployment
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]

ROUNDS = 6


def test_compare_shows_the_modeled_time_to_a_target_eval_loss(login: Login, server: Server) -> None:
    first = server.launch(tiny(rounds=ROUNDS, num_microbatches=4), name="to target M=4")
    second = server.launch(tiny(rounds=ROUNDS, num_microbatches=2), name="to target M=2")
    series = {}
    with server.client() as client:
        for run_id in (first, second):
            server.wait_for_run(run_id, ("succeeded",), timeout_s=120)
            params = {"fields": ["eval_loss", "latency_s"], "method": "none"}
            series[run_id] = client.get(f"/api/runs/{run_id}/rounds", params=params).json()["series"]
        # each run's median eval loss, the larger: both reach it
        target = max(sorted(s["eval_loss"]["value"])[ROUNDS // 2] for s in series.values())
        params = {"run_ids": f"{first},{second}", "baseline": first, "target_eval_loss": target}
        api = {row["run_id"]: row for row in client.get("/api/compare", params=params).json()["runs"]}

    page = login("viewer")
    page.goto(f"{server.url}/#/compare?ids={first},{second}&baseline={first}")
    table = page.locator("#compare-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator("th", has_text="Time to target")).to_have_count(0)  # no target, no column
    page.get_by_label("Target eval loss").fill(repr(target))
    page.get_by_role("button", name="Compare", exact=True).click()

    expect(page).to_have_url(re.compile(r"target="))  # kept in the address
    expect(table.locator("th", has_text="Time to target")).to_have_count(1)
    for run_id, row in api.items():
        assert row["time_to_target_s"] is not None and row["rounds_to_target"] is not None
        cell = table.locator(f"tr[data-run-id='{run_id}'] td[data-figure='time_to_target_s']")
        expect(cell).to_contain_text(f"({row['rounds_to_target']} rounds)")
        assert float(cell.get_attribute("data-value") or "nan") == pytest.approx(row["time_to_target_s"])
    expect(table.locator(f"tr[data-run-id='{first}'] td[data-figure='time_to_target_s']")).to_contain_text(
        "baseline"
    )
    ratio = api[second]["ratios"]["time_to_target_s"]
    assert ratio == pytest.approx(api[second]["time_to_target_s"] / api[first]["time_to_target_s"])
    other = table.locator(f"tr[data-run-id='{second}'] td[data-figure='time_to_target_s'] div").inner_text()
    assert float(other.lstrip("×")) == pytest.approx(ratio, abs=1e-3)
    screenshot(page, "compare-time-to-target")

    # the curves against the modeled elapsed time: Σ latency_s, recomputed here
    page.wait_for_function(
        "() => document.querySelector(\"[data-chart='compare-latency_s']\").data?.length === 2"
    )
    page.get_by_label("X axis").select_option(label="modeled time (s)")
    latency = page.locator("[data-chart='compare-latency_s']")
    expect(latency).to_have_attribute("data-x-axis", "elapsed_s")
    shown = page.evaluate("document.querySelector(\"[data-chart='compare-latency_s']\").data.map(t => t.x)")
    for run_id, x in zip((first, second), shown, strict=True):
        assert x == pytest.approx(list(itertools.accumulate(series[run_id]["latency_s"]["value"])))
    title = page.evaluate(
        "document.querySelector(\"[data-chart='compare-eval_loss']\").layout.xaxis.title.text"
    )
    assert title == "modeled elapsed time (s)"

    # a target that is not a loss: the API's reason, next to nothing drawn
    page.get_by_label("Target eval loss").fill("-1")
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("greater than or equal to 0")
