"""The launch form: generated from the schema, presets, the API's messages next to their fields,
the pre-flight panel, and a launched run whose points appear live on the per-device charts."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.configs import TINY_OVERRIDES, quickstart
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e


def field(page: Page, path: str):  # type: ignore[no-untyped-def]
    return page.locator(f".field[data-path='{path}']")


def open_form(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/#/launch")
    expect(page.locator("form[data-ready='true']")).to_be_attached(timeout=15_000)


def test_form_has_every_section_of_the_schema_and_loads_presets(login: Login, server: Server) -> None:
    page = login("operator")
    open_form(page, server)

    for section in ("experiment", "network", "channel", "model", "data", "training", "scheduler"):
        expect(page.locator(f"fieldset[data-section='{section}']")).to_be_visible()
    expect(page.get_by_label("executor")).to_have_value("simulated")
    expect(page.get_by_label("rounds", exact=True)).to_have_value("30")  # examples/quickstart.yaml
    page.get_by_label("Preset").select_option("paper-bert")
    expect(page.get_by_label("kind", exact=True)).to_have_value("classifier")
    expect(page.locator("[data-path='network.profiles'] tbody tr")).to_have_count(5)
    expect(page.get_by_label("name of row 1")).to_have_value("flagship-phone")
    screenshot(page, "launch-paper-bert-preset")


def test_form_shows_the_api_message_next_to_a_bad_field(login: Login, server: Server) -> None:
    bad = quickstart()
    bad["training"]["rounds"] = 0
    bad["channel"]["bandwidth_hz"] = "fast"
    with server.client() as client:
        refused = client.post("/api/config/validate", json=bad)
        runs_before = client.get("/api/runs").json()["total"]
    assert refused.status_code == 422
    expected = {d["field"]: d["message"] for d in refused.json()["error"]["details"]}
    page = login("operator")
    open_form(page, server)

    page.get_by_label("rounds", exact=True).fill("0")
    page.get_by_label("bandwidth_hz").fill("fast")
    page.get_by_role("button", name="Launch", exact=True).click()

    expect(field(page, "training.rounds").locator(".field-error")).to_have_text(
        expected["config.training.rounds"]
    )
    expect(field(page, "channel.bandwidth_hz").locator(".field-error")).to_have_text(
        expected["config.channel.bandwidth_hz"]
    )
    expect(page.get_by_label("rounds", exact=True)).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".error-summary")).to_contain_text("training.rounds")
    screenshot(page, "launch-refused-bad-value")
    # fixing the field clears its message on the next check; nothing was launched meanwhile
    page.get_by_label("rounds", exact=True).fill("5")
    page.get_by_label("bandwidth_hz").fill("1e7")
    page.get_by_role("button", name="Check & pre-flight").click()
    expect(page.locator("#preflight[data-state]")).to_be_attached()
    expect(field(page, "training.rounds").locator(".field-error")).to_be_hidden()
    with server.client() as client:
        assert client.get("/api/runs").json()["total"] == runs_before


def test_launch_quickstart_from_the_form_and_watch_rounds_arrive(login: Login, server: Server) -> None:
    page = login("operator")
    open_form(page, server)
    expect(page.get_by_label("Preset")).to_have_value("quickstart")
    for path, value in TINY_OVERRIDES.items():
        field(page, path).locator("input").fill(value)
    page.get_by_label("Run name").fill("e2e quickstart")

    page.get_by_role("button", name="Check & pre-flight").click()
    preflight = page.locator("#preflight")
    expect(preflight).to_have_attribute("data-state", "modeled")  # round 0 on the cost model
    expect(preflight).to_contain_text("Peak memory use")
    expect(preflight).to_contain_text("policy uniform")
    expect(preflight.locator(".main-svg").first).to_be_visible()
    screenshot(page, "launch-preflight")

    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    expect(page.get_by_role("heading", name="e2e quickstart")).to_be_visible()
    page.evaluate("window.__sameDocument = true")

    # points appear on the per-device charts as rounds are stored, without reloading the page
    counts = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        count = page.evaluate(
            "document.getElementById('chart-devices')?.data"
            "?.find(t => t.meta?.chart === 'queue' && t.meta.device)?.x.length ?? 0"
        )
        if not counts or count != counts[-1]:
            counts.append(count)
        if count >= 30:
            break
        time.sleep(0.05)
    assert counts[-1] == 30, counts
    assert len([c for c in counts if 0 < c < 30]) >= 1, f"no intermediate state seen: {counts}"
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    draws = page.evaluate(f"window.collapipeStats.draws.filter(d => d.runId === {run_id}).length")
    assert draws >= 1, "no round arrived through the live stream"
    # every per-device chart (a subplot of one of the two figures, with its title) gets every round;
    # a figure off screen catches up a moment later (redrawn in batches when the page is idle)
    for chart, title in (
        ("queue", "Virtual queue Q_k"),
        ("latency", "Latency split: compute vs communication"),
        ("memory", "Memory vs capacity"),
        ("energy", "Energy vs budget"),
        ("bandwidth", "Bandwidth share β_k"),
        ("power", "Transmit power p_k"),
    ):
        expect(page.locator(f"#title-{chart}")).to_have_text(title)
        page.wait_for_function(
            f"document.querySelector('[data-charts~=\"{chart}\"]').data"
            f".some(t => t.meta?.chart === '{chart}' && /^c\\d+-d\\d+$/.test(t.name) && t.x.length === 30)"
        )
    page.wait_for_function(
        "document.getElementById('chart-loss').data.some(t => /_loss$/.test(t.name) && t.x.length === 30)"
    )
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=30_000)
    expect(page.locator("[data-tile='rounds']")).to_have_text("30 / 30")
    # the live points are the stored records: every device's queue, round by round
    with server.client() as client:
        params = {"metric": "queue", "max_points": 1000}
        stored = client.get(f"/api/runs/{run_id}/devices", params=params).raise_for_status().json()
    shown = page.evaluate(
        "Object.fromEntries(document.getElementById('chart-devices').data"
        ".filter(t => t.meta?.chart === 'queue' && t.meta.device)"
        ".map(t => [t.meta.device, {round: Array.from(t.x), value: Array.from(t.y)}]))"
    )
    assert sorted(shown) == sorted(stored["series"])
    for device, series in stored["series"].items():
        assert shown[device]["round"] == series["round"] == list(range(30)), device
        assert shown[device]["value"] == pytest.approx(series["value"]), device
    # the segment heatmap is not redrawn off screen: it catches up once scrolled into view
    page.locator("#chart-segments").scroll_into_view_if_needed()
    page.wait_for_function("document.getElementById('chart-segments').data[0].x.length === 30")
    screenshot(page, "run-live-finished")
