"""The run view explains its decisions: the quickstart launched from the form pipelines its model (the
Gantt shows two devices or more holding blocks and M >= 2 micro-batches) and says so; bert-langid, whose
decision concentrates the encoder on one device, says what spreading it would cost; a round picked in
the decision log is explained; the gradient noise chart says why it is empty; strings of a record
reach the page as text."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.configs import PRESETS, tiny
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]  # the same page on both deployments

TERMS = ("compute", "links", "energy", "convergence")

# cluster 0's first pipeline iteration in the Gantt: the devices that run a forward pass (they hold
# blocks) and the micro-batches they run
GANTT_PIPELINE = """() => {
  const el = document.getElementById('chart-gantt');
  const forward = el.data.find((t) => t.name === 'forward');
  const devices = new Set();
  const microbatches = new Set();
  forward.y.forEach((participant, i) => {
    if (/^c\\d+-d\\d+$/.test(participant)) {
      devices.add(participant);
      microbatches.add(forward.customdata[i][0]);
    }
  });
  return { devices: [...devices].sort(), microbatches: [...microbatches].sort((a, b) => a - b) };
}"""

GRADIENT_NOISE_NOTE = """() => {
  const el = document.getElementById('chart-gradient-noise');
  return { points: el.data[0].x.length, notes: (el.layout.annotations || []).map((a) => a.text) };
}"""


def decision_item(server: Server, run_id: int, round_index: int) -> dict[str, Any]:
    with server.client() as client:
        params = {"from": round_index, "to": round_index}
        page = client.get(f"/api/runs/{run_id}/decisions", params=params).raise_for_status().json()
    [item] = page["items"]
    assert item["round"] == round_index
    return item


def change_text(entry: dict[str, Any], objective: float) -> str:
    """The table's 'Objective vs chosen' cell of a counterfactual: ΔJ / |J| in %."""
    change = entry["delta"]["objective"] / abs(objective)
    return f"{'+' if change > 0 else '−'}{100 * abs(change):.1f} %"


def weighs_most(entry: dict[str, Any]) -> str:
    """The term of ΔJ that weighs most in the direction of the change (as the sentence names it)."""
    delta = entry["delta"]
    sign = 1 if delta["objective"] > 0 else -1
    return max(TERMS, key=lambda t: sign * delta[t])


def expect_explained(page: Page, item: dict[str, Any]) -> None:
    """The panel shows ``item``'s round: its sentence, and a row per counterfactual with its figures."""
    panel = page.locator("#explanation")
    expect(panel).to_have_attribute("data-round", str(item["round"]))
    explanation = item["explanation"]
    expect(panel.locator(".explanation-sentence")).to_have_text(explanation["sentence"])
    rows = panel.locator("tr[data-counterfactual]")
    expect(rows).to_have_count(len(explanation["counterfactuals"]))
    for entry in explanation["counterfactuals"]:
        cells = panel.locator(f"tr[data-counterfactual='{entry['name']}'] td")
        expect(cells.nth(0)).to_have_text(entry["label"])
        if entry["decision"] is None:
            expect(cells.nth(1)).to_have_text("—")
            expect(cells.nth(4)).to_contain_text(entry["note"])
            continue
        expect(cells.nth(1)).to_have_text(change_text(entry, item["objective"]))
        expect(cells.nth(2)).to_have_attribute("data-term", weighs_most(entry))
        expect(cells.nth(3)).to_have_text("; ".join(entry["memory"]) or "fits")


def test_the_quickstart_launched_from_the_form_shows_its_pipeline_and_why(
    login: Login, server: Server
) -> None:
    page = login("operator")
    page.goto(f"{server.url}/#/launch")
    # the form reads its preset through the server's config check, whose process starts on first use
    expect(page.locator("form[data-ready='true']")).to_be_attached(timeout=60_000)
    expect(page.get_by_label("Preset")).to_have_value("quickstart")
    page.get_by_label("rounds", exact=True).fill("2")  # everything else as the preset has it
    page.get_by_label("Run name").fill("e2e pipelined quickstart")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"), timeout=60_000)
    run_id = int(page.url.rsplit("/", 1)[1])

    # the Gantt follows the newest round as rounds arrive; the explanation shows the same round
    gantt = page.locator("#chart-gantt")
    expect(gantt).to_have_attribute("data-round", re.compile(r"^\d+$"), timeout=180_000)
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=180_000)
    expect(gantt).to_have_attribute("data-round", "1")
    pipeline = page.evaluate(GANTT_PIPELINE)
    newest = decision_item(server, run_id, 1)
    cluster = newest["decision"]["clusters"][0]
    holders = [d for d in cluster["devices"] if d["num_blocks"] > 0]
    assert len(pipeline["devices"]) >= 2, pipeline  # a pipeline, not one device
    assert pipeline["devices"] == sorted(d["device"] for d in holders), (pipeline, cluster)
    num_microbatches = len(pipeline["microbatches"])
    assert num_microbatches >= 2 and num_microbatches == cluster["num_microbatches"], pipeline
    expect(page.locator("#gantt")).to_contain_text(f"M = {num_microbatches} micro-batches")

    # the explanation of that round: the placement the Gantt shows, and every alternative
    expect_explained(page, newest)
    placement = (
        f"cluster 0: TEBs {'+'.join(str(d['num_blocks']) for d in holders)} over {len(holders)} devices, "
        f"M = {num_microbatches}"
    )
    sentence = page.locator("#explanation .explanation-sentence")
    expect(sentence).to_be_visible()
    expect(sentence).to_contain_text(placement)
    expect(page.locator("#explanation")).to_contain_text("the newest")
    page.locator("#explanation").scroll_into_view_if_needed()
    screenshot(page, "run-explanation-quickstart")

    # a round opened from the decision log: its explanation and its Gantt; then back to the newest
    page.get_by_role("button", name="Open round 0", exact=True).click()
    expect_explained(page, decision_item(server, run_id, 0))
    expect(gantt).to_have_attribute("data-round", "0")
    expect(page.locator("#decisions tr.selected")).to_have_attribute("data-round", "0")
    page.locator("#explanation").get_by_role("button", name="Newest round").click()
    expect(page.locator("#explanation")).to_have_attribute("data-round", "1")
    expect(gantt).to_have_attribute("data-round", "1")
    expect(page.locator("#decisions tr.selected")).to_have_count(0)
    # a round typed in the Gantt's box is explained too
    page.locator("#gantt").get_by_label("Round", exact=True).fill("0")
    page.locator("#gantt").get_by_role("button", name="Show timeline").click()
    expect(page.locator("#explanation")).to_have_attribute("data-round", "0")

    # M = 8 micro-batches per step: the simulated executor measured the gradient noise scale
    page.wait_for_function("() => document.getElementById('chart-gradient-noise').data[0].x.length === 2")


def test_a_concentrated_decision_says_what_spreading_would_cost(login: Login, server: Server) -> None:
    config = json.loads((PRESETS / "bert-langid.json").read_text(encoding="utf-8"))
    config["executor"] = "analytic"
    config["training"]["rounds"] = 2
    run_id = server.launch(config, name="e2e bert-langid concentrated")
    server.wait_for_run(run_id, ("succeeded",))
    page = login("viewer")
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)

    item = decision_item(server, run_id, 1)
    [spread] = [e for e in item["explanation"]["counterfactuals"] if e["name"] == "spread"]
    assert spread["decision"] is not None and spread["delta"]["objective"] > 0, spread
    expect_explained(page, item)
    sentence = page.locator("#explanation .explanation-sentence")
    expect(sentence).to_be_visible()
    expect(sentence).to_contain_text(re.compile(r"cluster 0: all 4 TEBs on c0-d\d"))
    change = spread["delta"]["objective"] / item["objective"]
    expect(sentence).to_contain_text(
        f"the best placement over two or more devices per cluster costs {100 * change:.1f}% more"
    )
    row = page.locator("#explanation tr[data-counterfactual='spread']")
    expect(row.locator("td").nth(1)).to_have_text(change_text(spread, item["objective"]))
    expect(page.locator("#explanation")).to_contain_text("constrained solve")  # its own time
    page.locator("#explanation").scroll_into_view_if_needed()
    screenshot(page, "run-explanation-concentrated")

    # nothing trains on the analytic executor: the gradient noise chart says so
    page.wait_for_function("() => document.getElementById('chart-gradient-noise').layout")
    note = page.evaluate(GRADIENT_NOISE_NOTE)
    assert note["points"] == 0 and note["notes"] == ["no values: the analytic executor trains nothing"], note


def test_the_gradient_noise_chart_says_no_step_had_several_microbatches(login: Login, server: Server) -> None:
    """A simulated run that trains with M = 1: nothing to estimate B_noise from, and the chart says why
    (not the analytic executor: this run trains)."""
    run_id = server.launch(tiny(rounds=2, num_microbatches=1), name="e2e one micro-batch")
    server.wait_for_run(run_id, ("succeeded",))
    page = login("viewer")
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)
    page.wait_for_function("() => document.getElementById('chart-loss').data[0].x.length === 2")  # it trains
    note = page.evaluate(GRADIENT_NOISE_NOTE)
    assert note["points"] == 0 and len(note["notes"]) == 1, note
    assert "every training step so far had M = 1 micro-batch" in note["notes"][0], note
    assert "analytic" not in note["notes"][0], note


HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def test_strings_of_an_explanation_reach_the_page_as_text(login: Login) -> None:
    """Every string of a stored explanation (sentence, labels, notes, memory refusals, violations) is
    shown as text: markup in one makes no element and runs nothing."""
    page = login("viewer")
    shown = page.evaluate(
        """async (hostile) => {
          const { ExplanationView } = await import('/js/run/explanation.js');
          const view = new ExplanationView(0);
          document.body.append(view.panel);
          const delta = { objective: 1, latency_s: 0.1, compute: 0.2, links: 0.8, energy: 0, convergence: 0 };
          view.load([{ round: 3, objective: 2, explanation: {
            sentence: `placement ${hostile}`, spread_solve_s: 0.01,
            counterfactuals: [
              { name: 'spread', label: `label ${hostile}`, decision: {}, note: `note ${hostile}`,
                objective: 3, feasible: false, violations: [`violation ${hostile}`],
                memory: [`memory ${hostile}`], delta },
              { name: 'uniform', label: 'the uniform split', decision: {}, note: '', objective: 3,
                feasible: false, violations: [`energy ${hostile}`], memory: [], delta },
              { name: 'fewer_microbatches', label: `fewer ${hostile}`, decision: null,
                note: `none ${hostile}` },
            ] } }]);
          const panel = document.getElementById('explanation');
          return {
            elements: panel.querySelectorAll('img, script').length,
            text: panel.textContent,
            rows: [...panel.querySelectorAll('tr[data-counterfactual]')]
              .map((tr) => [...tr.cells].map((td) => td.textContent)),
          };
        }""",
        HOSTILE,
    )
    page.wait_for_timeout(200)  # an image's error handler would have run by now
    assert shown["elements"] == 0, shown
    assert page.evaluate("window.__pwned === undefined")
    assert f"placement {HOSTILE}" in shown["text"]
    spread, uniform, fewer = shown["rows"]
    assert spread == [f"label {HOSTILE}", "+50.0 %", "link time +0.8", f"memory {HOSTILE}", f"note {HOSTILE}"]
    assert uniform[3:] == ["fits", f"infeasible: energy {HOSTILE}"], uniform
    assert fewer == [f"fewer {HOSTILE}", "—", "—", "—", f"none {HOSTILE}"]
