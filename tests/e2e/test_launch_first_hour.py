"""A new user's first hour on the launch form: the first pre-flight of the quickstart preset, one name
field, help texts without docstring markup, an empty field left out of the config, pre-flight tiles
that say what they mean; bringing one's own checkpoint and JSONL in one check (the sizes read from the
checkpoint, hf_config fields the new family lacks dropped, the data's windows shown with the largest
valid samples, every problem in one answer)."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]  # the form and /api/config: one code

CHECKPOINT = "checkpoints/e2e-gpt2"
DATASET = "datasets/e2e-own.jsonl"
GPT2_CONFIG = {  # what save_pretrained writes for a tiny GPT-2, the keys CollaPipe reads and a few more
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 32,
    "n_head": 2,
    "n_layer": 4,
    "n_inner": None,
    "n_positions": 64,
    "vocab_size": 300,
    "bos_token_id": 299,
    "eos_token_id": 299,
}


def field(page: Page, path: str):  # type: ignore[no-untyped-def]
    return page.locator(f".field[data-path='{path}']")


def open_form(page: Page, server: Server, query: str = "") -> None:
    page.goto(f"{server.url}/#/launch{query}")
    expect(page.locator("form[data-ready='true']")).to_be_attached(timeout=30_000)


def _own_text() -> bytes:
    """1,500 short Python-like lines: a few hundred windows of 65 tokens (the preset's BPE tokenizer)."""
    rng = random.Random(0)
    words = (
        "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega value result index count total"
    )
    lines = []
    for i in range(1500):
        a, b = rng.sample(words.split(), 2)
        lines.append(
            json.dumps({"text": f"def {a}_{i}({b}):\n    return {b} * {i % 97} + {a}_{(i * 7) % 50}"})
        )
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def own_files(server: Server) -> None:
    """A tiny GPT-2 checkpoint's config.json and a JSONL of texts, uploaded as a user would."""
    octets = {"Content-Type": "application/octet-stream"}
    with server.client() as client:
        for name, content in [
            (f"{CHECKPOINT}/config.json", json.dumps(GPT2_CONFIG).encode()),
            (DATASET, _own_text()),
        ]:
            put = client.put(
                f"/api/files/{name}", content=content, params={"overwrite": "true"}, headers=octets
            )
            assert put.status_code == 201, put.text


def test_the_first_check_one_name_plain_help_an_empty_field_and_plain_tiles(
    login: Login, server: Server
) -> None:
    page = login("operator")
    open_form(page, server)
    expect(page.get_by_label("Preset")).to_have_value("quickstart")
    # the first "Check & pre-flight" of the server: the quickstart's round 0, within the deadline;
    # d_model left empty is left out of the config (its default applies), not sent as ""
    page.get_by_label("d_model", exact=True).fill("")
    with page.expect_request(lambda r: r.url.endswith("/api/config/validate") and r.method == "POST") as sent:
        page.get_by_role("button", name="Check & pre-flight").click()
    assert "d_model" not in sent.value.post_data_json["model"]
    preflight = page.locator("#preflight")
    expect(preflight).to_have_attribute("data-state", "modeled", timeout=60_000)
    expect(page.locator(".error-summary")).to_be_hidden()
    # the tiles: peak memory in bytes on a named device; feasibility of the round beside the energy
    # budget, a long-term constraint
    memory = preflight.locator("[data-tile='memory']")
    expect(memory.locator(".tile-value")).to_have_text(re.compile(r"^[\d.]+ (B|KiB|MiB|GiB)$"))
    expect(memory.locator(".tile-note")).to_have_text(
        re.compile(r"^on c\d+-d\d+: [\d.]+ % of its [\d.]+ (KiB|MiB|GiB)$")
    )
    expect(preflight.locator("[data-tile='feasible'] .tile-label")).to_have_text("Feasible this round")
    expect(preflight.locator("[data-tile='feasible'] .tile-note")).to_contain_text(
        "energy is not a per-round limit"
    )
    expect(preflight.locator("[data-tile='energy'] .tile-note")).to_contain_text("long-term average")
    screenshot(page, "launch-first-preflight")
    # help texts: literals as code, no docstring markup anywhere
    model = page.locator("fieldset[data-section='model']")
    expect(model.locator(".section-description code", has_text="source: builtin")).to_be_visible()
    assert "``" not in page.locator("form").inner_text()
    assert "`" not in page.locator("form").inner_text()
    # one name: the config's, labelled as the run's; the launch sends no other
    expect(page.get_by_label("Run name")).to_have_count(1)
    expect(page.get_by_label("Run name")).to_have_value("quickstart")
    page.get_by_label("Run name").fill("e2e first hour")
    held: list[Any] = []

    def hold(route: Route) -> None:
        held.append(route.request.post_data_json)
        route.fulfill(
            status=422, json={"error": {"code": "held", "message": "held by the test", "details": []}}
        )

    page.route(re.compile(r"/api/runs$"), hold)
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.locator(".error-summary")).to_contain_text("held by the test")
    assert list(held[0]) == ["config"] and held[0]["config"]["name"] == "e2e first hour"


def test_bringing_a_checkpoint_and_a_jsonl_takes_one_check(
    login: Login, server: Server, own_files: None
) -> None:
    page = login("operator")
    open_form(page, server, "?preset=llm-causal")
    expect(page.locator("form[data-preset-loaded='llm-causal']")).to_be_attached(timeout=30_000)
    expect(page.get_by_label("hf_config")).to_have_value('{"rope_theta": 10000}')
    # the checkpoint: the sizes are its config.json's, greyed out; its architecture replaces llama, and
    # hf_config loses rope_theta, which gpt2 lacks (num_kv_heads too)
    page.get_by_label("pretrained_path: choose from the server's checkpoints").select_option(CHECKPOINT)
    expect(field(page, "model.architecture").locator("select")).to_have_value("gpt2")
    for name, value in [
        ("d_model", "32"),
        ("num_heads", "2"),
        ("ffn_dim", "128"),
        ("num_blocks", "4"),
        ("vocab_size", "300"),
    ]:
        size = page.get_by_label(name, exact=True)
        expect(size).to_have_value(value)
        expect(size).to_have_attribute("readonly", "")
    expect(page.get_by_label("num_kv_heads")).to_have_value("")
    expect(page.get_by_label("hf_config")).to_have_value("")
    expect(page.locator("[data-role='dropped']")).to_have_text(
        "Dropped for gpt2, which has no such field: rope_theta, num_kv_heads."
    )
    expect(page.locator("[data-role='checkpoint-sizes']")).to_contain_text("model.seq_len may be at most 64")
    # the user's texts: the form counts their windows and offers the largest samples that fit
    page.get_by_label("dataset", exact=True).select_option("files")
    page.get_by_label("set files").check()
    page.get_by_label("train: choose from the server's datasets").select_option(DATASET)
    count = page.locator("[data-role='dataset-count']")
    counted = re.compile(
        rf"^'{DATASET}' holds (\d+) usable windows of model.seq_len \+ 1 = 65 tokens "
        r"\(data.eval_samples are held out of them\)\.$"
    )
    expect(count).to_have_text(counted, timeout=30_000)
    windows = int(counted.match(count.inner_text()).group(1))  # type: ignore[union-attr]
    largest = (windows - 128) // 2  # the preset's 128 eval windows, 2 clusters
    offered = page.locator("[data-largest='data.samples_per_cluster']")
    expect(offered).to_have_text(
        f"Largest data.samples_per_cluster with this data.eval_samples: {largest} Use {largest}"
    )
    # a typo in another section, and too many samples: both in one answer
    page.get_by_label("lr", exact=True).fill("0.0o3")
    page.get_by_role("button", name="Check & pre-flight").click()
    summary = page.locator(".error-summary")
    expect(summary.locator("li")).to_have_count(2)
    expect(summary).to_contain_text("training.lr")
    expect(summary).to_contain_text(f"data.samples_per_cluster may be at most {largest}")
    screenshot(page, "launch-own-checkpoint-problems")
    page.get_by_label("lr", exact=True).fill("0.003")
    offered.get_by_role("button", name=f"Use {largest}").click()
    expect(page.get_by_label("samples_per_cluster", exact=True)).to_have_value(str(largest))
    page.get_by_role("button", name="Check & pre-flight").click()
    expect(page.locator("#preflight")).to_have_attribute("data-state", "modeled", timeout=60_000)
    expect(summary).to_be_hidden()
    screenshot(page, "launch-own-checkpoint-preflight")
