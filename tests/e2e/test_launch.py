"""The launch form: generated from the schema (Hugging Face models, the user's files, free-key JSON
objects), every preset, the API's messages next to their fields, suggestions of the server's files
and policies, the pre-flight panel, and launched runs: points appearing live on the per-device
charts, and a causal LM's falling eval loss and its perplexity."""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.configs import PRESETS, TINY_OVERRIDES, quickstart
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e


def field(page: Page, path: str):  # type: ignore[no-untyped-def]
    return page.locator(f".field[data-path='{path}']")


def open_form(page: Page, server: Server) -> None:
    page.goto(f"{server.url}/#/launch")
    # the form shows its preset as the API reads it: the session's first check waits for the checks'
    # child to warm up (backend/preflight.py), tens of seconds on a loaded machine
    expect(page.locator("form[data-ready='true']")).to_be_attached(timeout=60_000)


def fill_tiny(page: Page) -> None:
    """TINY_OVERRIDES typed into the form; they set a fixed micro-batch (training.microbatch_size), so
    the quickstart's fixed batch (training.batch_size, the other reading) is emptied: none."""
    for path, value in TINY_OVERRIDES.items():
        field(page, path).locator("input").fill(value)
    field(page, "training.batch_size").locator("input").fill("")


@pytest.mark.deployments("embedded")  # the form and /api/config: the same code on both
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


@pytest.mark.deployments("embedded")  # the form and /api/config: the same code on both
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
    # the server's first pre-flight starts its child process: several seconds on a busy machine
    expect(page.locator("#preflight[data-state]")).to_be_attached(timeout=30_000)
    expect(field(page, "training.rounds").locator(".field-error")).to_be_hidden()
    with server.client() as client:
        assert client.get("/api/runs").json()["total"] == runs_before


def test_launch_quickstart_from_the_form_and_watch_rounds_arrive(login: Login, server: Server) -> None:
    page = login("operator")
    open_form(page, server)
    expect(page.get_by_label("Preset")).to_have_value("quickstart")
    fill_tiny(page)
    page.get_by_label("Run name").fill("e2e quickstart")

    page.get_by_role("button", name="Check & pre-flight").click()
    preflight = page.locator("#preflight")
    expect(preflight).to_have_attribute("data-state", "modeled", timeout=60_000)  # round 0 on the cost model
    expect(preflight).to_contain_text("Peak memory use")
    expect(preflight).to_contain_text("policy dssda")
    expect(preflight.locator(".main-svg").first).to_be_visible()
    screenshot(page, "launch-preflight")

    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"), timeout=60_000)
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
            "() => "
            f"document.querySelector('[data-charts~=\"{chart}\"]').data"
            f".some(t => t.meta?.chart === '{chart}' && /^c\\d+-d\\d+$/.test(t.name) && t.x.length === 30)"
        )
    page.wait_for_function(
        "() => "
        "document.getElementById('chart-loss').data.some(t => /_loss$/.test(t.name) && t.x.length === 30)"
    )
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=30_000)
    expect(page.locator("[data-tile='rounds']")).to_have_text("30 / 30")
    # the live points are the stored records: every device's queue, round by round
    with server.client() as client:
        params = {"metric": "queue", "max_points": 1000}
        answer = client.get(f"/api/runs/{run_id}/devices", params=params).raise_for_status().json()
        stored = answer["metrics"]["queue"]
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
    page.wait_for_function("() => document.getElementById('chart-segments').data[0].x.length === 30")
    screenshot(page, "run-live-finished")
    # the gradient noise scale the executor measured, drawn live as it was stored (a log axis)
    with server.client() as client:
        params = {"fields": "gradient_noise_scale", "method": "none"}
        answer = client.get(f"/api/runs/{run_id}/rounds", params=params).raise_for_status().json()
        noise = answer["series"]["gradient_noise_scale"]
    assert noise["round"], "the simulated executor measured no gradient noise scale"
    page.locator("#chart-gradient-noise").scroll_into_view_if_needed()
    page.wait_for_function(
        f"() => document.getElementById('chart-gradient-noise').data[0].x.length === {len(noise['round'])}"
    )
    drawn = page.evaluate(
        "(() => { const el = document.getElementById('chart-gradient-noise');"
        " return {x: Array.from(el.data[0].x), y: Array.from(el.data[0].y), axis: el.layout.yaxis.type}; })()"
    )
    assert drawn["axis"] == "log"
    assert drawn["x"] == noise["round"] and drawn["y"] == pytest.approx(noise["value"])


PRESET_IDS = [p["id"] for p in json.loads((PRESETS / "index.json").read_text(encoding="utf-8"))]


def choose_preset(page: Page, preset: str) -> None:
    """Select a preset and wait until the form shows it as the API reads it (defaults filled in)."""
    page.get_by_label("Preset").select_option(preset)
    expect(page.locator(f"form[data-preset-loaded='{preset}']")).to_be_attached(timeout=20_000)


@pytest.mark.deployments("embedded")  # the form and the config endpoints are the same code on both
def test_every_preset_fills_the_form_and_its_first_round_is_modeled(login: Login, server: Server) -> None:
    page = login("operator")
    open_form(page, server)
    assert len(PRESET_IDS) == 9
    preflight = page.locator("#preflight")
    for preset in PRESET_IDS:
        choose_preset(page, preset)
        page.get_by_role("button", name="Check & pre-flight").click()
        # the 7B model's profile is measured the first time: a few seconds
        expect(preflight).to_have_attribute("data-state", "modeled", timeout=60_000)
        expect(page.locator(".error-summary")).to_be_hidden()
        if preset == "llm-causal":
            # the fields of a Hugging Face model and of the tokenizer, as the preset sets them; kind
            # is the architecture's (the preset leaves it out, the API fills it in)
            expect(field(page, "model.source").locator("select")).to_have_value("transformers")
            expect(field(page, "model.architecture").locator("select")).to_have_value("llama")
            expect(page.get_by_label("kind", exact=True)).to_have_value("causal_lm")
            expect(page.get_by_label("num_kv_heads")).to_have_value("2")
            expect(page.get_by_label("hf_config")).to_have_value('{"rope_theta": 10000}')
            expect(page.get_by_label("tokenizer kind")).to_have_value("bpe")
            expect(page.get_by_label("tokenizer vocab_size")).to_have_value("2000")
            expect(page.get_by_label("truncate")).to_be_checked()
            expect(page.get_by_label("set files")).not_to_be_checked()  # data.files: null
            expect(field(page, "data.files.train")).to_be_hidden()
        if preset == "quickstart":
            expect(field(page, "model.architecture").locator("select")).to_have_value("")  # none
            expect(page.get_by_label("hf_config")).to_have_value("")  # {}
    expect(preflight).to_contain_text("policy dssda")
    screenshot(page, "launch-preset-llama-7b-preflight")


@pytest.mark.deployments("embedded")
def test_bad_hf_config_json_gets_the_api_message_next_to_it(login: Login, server: Server) -> None:
    typed = '{"rope_theta": 10000,}'  # not JSON: the form sends it as typed
    config = json.loads((PRESETS / "llm-causal.json").read_text(encoding="utf-8"))
    config["model"]["hf_config"] = typed
    with server.client() as client:
        refused = client.post("/api/config/validate", json=config)
    assert refused.status_code == 422
    expected = {d["field"]: d["message"] for d in refused.json()["error"]["details"]}
    assert list(expected) == ["config.model.hf_config"]
    page = login("operator")
    open_form(page, server)
    choose_preset(page, "llm-causal")

    page.get_by_label("hf_config").fill(typed)
    page.get_by_role("button", name="Check & pre-flight").click()
    error = field(page, "model.hf_config").locator("> .field-error")
    expect(error).to_have_text(expected["config.model.hf_config"])
    expect(page.get_by_label("hf_config")).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".error-summary")).to_contain_text("model.hf_config")
    screenshot(page, "launch-refused-hf-config")
    page.get_by_label("hf_config").fill('{"rope_theta": 10000.0, "rms_norm_eps": 1e-6}')
    page.get_by_role("button", name="Check & pre-flight").click()
    expect(page.locator("#preflight")).to_have_attribute("data-state", "modeled", timeout=30_000)
    expect(error).to_be_hidden()


def reverse_words_csv(rows: int) -> bytes:
    """A seq2seq dataset (source, target: the word reversed) of ``rows`` words."""
    words = ["".join("abcdefghij"[(i * 7 + j * 3) % 10] for j in range(3 + i % 5)) for i in range(rows)]
    return ("source,target\n" + "".join(f"{w},{w[::-1]}\n" for w in words)).encode()


@pytest.mark.deployments("embedded")
def test_choose_an_uploaded_dataset_from_the_suggestions(login: Login, server: Server) -> None:
    with server.client() as client:
        put = client.put(
            "/api/files/datasets/e2e-reverse.csv",
            content=reverse_words_csv(160),  # data.eval_samples 32 + 2 clusters x 64
            params={"overwrite": "true"},
            headers={"Content-Type": "application/octet-stream"},
        )
        assert put.status_code == 201, put.text
        policies = client.get("/api/config/policies").raise_for_status().json()
    page = login("operator")
    open_form(page, server)
    fill_tiny(page)
    # the policy is a choice of the server's policies (GET /api/config/policies), no free text
    policy = field(page, "scheduler.policy").locator("select")
    assert policy.locator("option").all_inner_texts() == policies
    expect(policy).to_have_value("dssda")  # the quickstart's
    expect(field(page, "scheduler.policy").locator("input")).to_have_count(0)
    policy.select_option("uniform")

    page.get_by_label("dataset", exact=True).select_option("files")
    page.get_by_label("set files").check()
    train = page.get_by_label("files train")
    expect(train).to_have_value("")
    page.get_by_label("train: choose from the server's datasets").select_option("datasets/e2e-reverse.csv")
    expect(train).to_have_value("datasets/e2e-reverse.csv")
    expect(field(page, "data.files.format").locator("select")).to_have_value("")  # none: from the suffix
    page.get_by_role("button", name="Check & pre-flight").click()
    expect(page.locator("#preflight")).to_have_attribute("data-state", "modeled", timeout=30_000)
    expect(page.locator(".error-summary")).to_be_hidden()
    screenshot(page, "launch-uploaded-dataset")


@pytest.mark.deployments("embedded")  # the form and /api/config: the same code on both
def test_launch_the_causal_lm_preset_and_see_its_perplexity(login: Login, server: Server) -> None:
    page = login("operator")
    open_form(page, server)
    choose_preset(page, "llm-causal")
    page.get_by_label("rounds", exact=True).fill("4")  # everything else as the preset has it
    page.get_by_label("Run name").fill("e2e causal lm")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"), timeout=60_000)  # checked as it is stored
    run_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=120_000)

    page.wait_for_function(
        "() => document.getElementById('chart-loss')?.data?.find(t => t.name === 'eval_loss')?.x.length === 4"
    )
    eval_loss = page.evaluate(
        "Array.from(document.getElementById('chart-loss').data.find(t => t.name === 'eval_loss').y)"
    )
    assert eval_loss[-1] < eval_loss[0], eval_loss
    # perplexity has a figure of its own (a log axis: hundreds to thousands)
    page.wait_for_function("() => document.getElementById('chart-perplexity')?.data?.[0]?.x.length === 4")
    shown = page.evaluate(
        "(() => { const el = document.getElementById('chart-perplexity');"
        " return {name: el.data[0].name, y: Array.from(el.data[0].y), axis: el.layout.yaxis.type}; })()"
    )
    with server.client() as client:
        params = {"fields": "eval_perplexity"}
        stored = client.get(f"/api/runs/{run_id}/rounds", params=params).raise_for_status().json()
    assert shown["name"] == "eval_perplexity"
    assert shown["axis"] == "log"
    assert shown["y"] == pytest.approx(stored["series"]["eval_perplexity"]["value"])
    assert shown["y"][-1] < shown["y"][0]
    tile = page.locator("[data-tile='eval']")
    expect(tile).to_have_attribute("data-metric", "eval_perplexity")
    expect(page.locator(".tile", has=tile)).to_contain_text("Eval perplexity")
    page.locator("#chart-perplexity").scroll_into_view_if_needed()
    screenshot(page, "run-causal-lm-perplexity")
