"""A run with the distributed executor, launched from the dashboard, shows what its ranks measured.

An operator launches a tiny config (1 cluster × 2 devices: 4 ranks, 2 rounds) with executor
``distributed`` from the form and watches it finish; the run view then shows, per participant, the
measured memory and times beside the modeled ones — live, and again from the stored records after a
reload. Every figure on screen is checked against the API's stored records, which hold what the
ranks reported.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.configs import TINY_OVERRIDES
from tests.e2e.conftest import ARTIFACTS, Login, screenshot
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.distributed]

OVERRIDES = {
    **TINY_OVERRIDES,
    "training.rounds": "2",
    "network.num_clusters": "1",
    "network.devices_per_cluster": "2",
}
PARTICIPANTS = ["c0-cu", "c0-d0", "c0-d1", "c0-edge"]
DEVICES = ["c0-d0", "c0-d1"]
MIB = 2**20


def _trace(page: Page, chart: str, name: str) -> dict[str, Any]:
    trace: dict[str, Any] | None = page.evaluate(
        "([chart, name]) => { const t = document.getElementById(chart).data.find(t => t.name === name);"
        " return t ? {x: Array.from(t.x), y: Array.from(t.y), showlegend: t.showlegend, meta: t.meta}"
        " : null; }",
        [chart, name],
    )
    assert trace is not None, f"{chart} has no trace named {name!r}"
    return trace


def _stored_measured(server: Server, run_id: int) -> dict[int, dict[str, dict[str, float]]]:
    with server.client() as client:
        page = client.get(f"/api/runs/{run_id}/decisions").raise_for_status().json()
    return {item["round"]: item["measured"] for item in page["items"]}


def _check_measured_view(page: Page, stored: dict[int, dict[str, dict[str, float]]]) -> None:
    last = stored[1]
    expect(page.locator("#measured h3")).to_contain_text("round 1")
    rows = page.locator("#measured tbody tr")
    expect(rows).to_have_count(4)
    assert [rows.nth(i).get_attribute("data-participant") for i in range(4)] == PARTICIPANTS
    for participant in PARTICIPANTS:
        row = page.locator(f"#measured tr[data-participant='{participant}']")
        for field in ("measured-compute_s", "measured-send_s", "measured-idle_s", "measured-peak_rss_bytes"):
            expect(row.locator(f"[data-field='{field}']")).not_to_have_text("—")
    for device in DEVICES:  # devices also have the model's figures; the CU and edge server do not
        row = page.locator(f"#measured tr[data-participant='{device}']")
        expect(row.locator("[data-field='modeled-compute_s']")).not_to_have_text("—")
        expect(row.locator("[data-field='modeled-memory']")).to_have_text(re.compile(r"(KiB|MiB)$"))
    expect(
        page.locator("#measured tr[data-participant='c0-edge'] [data-field='modeled-compute_s']")
    ).to_have_text("—")

    # bar charts: the same real numbers the ranks reported, for every participant
    tensor = _trace(page, "chart-measured-memory", "measured: tensor peak")
    assert tensor["x"] == PARTICIPANTS
    assert tensor["y"] == [last[p]["peak_tensor_bytes"] for p in PARTICIPANTS]
    assert all(y > 0 for y in tensor["y"])
    rss = _trace(page, "chart-measured-memory", "measured: state + RSS rise")
    assert rss["y"] == [
        last[p]["resident_state_bytes"] + last[p]["peak_rss_delta_bytes"] for p in PARTICIPANTS
    ]
    modeled = _trace(page, "chart-measured-memory", "modeled (without runtime overhead)")
    assert modeled["y"][0] is None and modeled["y"][3] is None  # CU and edge server: no modeled record
    assert all(y > 0 for y in modeled["y"][1:3])
    compute = _trace(page, "chart-measured-time", "measured compute")
    assert compute["y"] == [last[p]["compute_s"] for p in PARTICIPANTS] and all(y > 0 for y in compute["y"])
    assert all(y > 0 for y in _trace(page, "chart-measured-time", "modeled compute")["y"][1:3])

    # the per-device memory chart: a measured trace (in the legend) beside the modeled lines
    page.wait_for_function(
        "() => "
        "document.getElementById('chart-devices').data"
        ".some(t => t.name === 'measured process peak RSS' && t.x.length === 4)"
    )
    process = _trace(page, "chart-devices", "measured process peak RSS")
    assert process["meta"] == {"chart": "memory", "kind": "measured"}  # on the memory subplot
    assert process["showlegend"] is True
    points = sorted(zip(process["x"], process["y"], strict=True))
    expected = sorted((r, stored[r][d]["peak_rss_bytes"]) for r in (0, 1) for d in DEVICES)
    assert points == expected
    assert all(y > 100 * MIB for _, y in points), points  # a real Python + torch process


def test_a_distributed_run_launched_from_the_form_shows_measured_figures(
    login: Login, server: Server
) -> None:
    page = login("operator")
    page.goto(f"{server.url}/#/launch")
    # the session's first check waits for the checks' child to warm up (backend/preflight.py)
    expect(page.locator("form[data-ready='true']")).to_be_attached(timeout=60_000)
    page.get_by_label("executor").select_option("distributed")
    for path, value in OVERRIDES.items():
        page.locator(f".field[data-path='{path}'] input").fill(value)
    # OVERRIDES set a fixed micro-batch (training.microbatch_size): the preset's fixed batch
    # (training.batch_size, the other reading of micro-batching) is emptied, none
    page.locator(".field[data-path='training.batch_size'] input").fill("")
    # every device holds blocks under uniform (DSSDA, the preset's policy, may give one none)
    page.locator(".field[data-path='scheduler.policy'] select").select_option("uniform")
    page.get_by_label("Run name").fill("e2e distributed")

    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    expect(page.get_by_role("heading", name="e2e distributed")).to_be_visible()
    expect(page.locator("body")).to_contain_text("executor distributed")

    run = server.wait_for_run(run_id, ("succeeded", "failed"), timeout_s=240)
    assert run["status"] == "succeeded", run.get("error")
    stored = _stored_measured(server, run_id)
    assert sorted(stored) == [0, 1]
    for measured in stored.values():
        assert sorted(measured) == sorted(PARTICIPANTS)  # the CU's and edge server's figures are stored

    # live: the rounds arrived through the event stream (the page opens seconds before the ranks are up)
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=30_000)
    page.wait_for_function(f"() => window.collapipeStats.draws.filter(d => d.runId === {run_id}).length >= 1")
    _check_measured_view(page, stored)
    screenshot(page, "run-distributed-live")

    # from the stored records: a fresh load of the finished run shows the same figures
    page.reload()
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=30_000)
    _check_measured_view(page, stored)
    page.locator("#measured").scroll_into_view_if_needed()
    screenshot(page, "run-distributed-measured")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    section = page.locator("#chart-measured-memory").locator("xpath=ancestor::div[contains(@class,'grid-2')]")
    section.screenshot(path=str(ARTIFACTS / "run-distributed-measured-charts.png"))
    page.locator("#measured").screenshot(path=str(ARTIFACTS / "run-distributed-measured-table.png"))
    page.locator("#chart-devices").screenshot(path=str(ARTIFACTS / "run-distributed-device-charts.png"))
