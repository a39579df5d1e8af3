"""A researcher's first hour, walked in the browser on a fresh embedded server (issue 32): the empty
runs list's way to the quickstart, its first pre-flight and a 2-round launch; their own JSONL and a
tiny random ``save_pretrained`` GPT-2 uploaded on the Data page and launched (one typo of theirs, one
fix); an analytic study; compare and its CSV; the study's HTML report.

The walk may ask the API to check a config and be told to fix something once: for the typo. With
COLLAPIPE_SCREENSHOT_DIR set it also saves the run view, the study page and the HTML report there
(scripts/screenshots.py: docs/img/)."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Response, expect

from tests.e2e.conftest import RequestGuard
from tests.e2e.server import PASSWORDS, USERNAMES, Server, running_server

pytestmark = pytest.mark.e2e

CHECKPOINT = "tiny-gpt2"
DATASET = "own-snippets.jsonl"
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def fresh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An embedded server no test has used: no runs, checks and pre-flights not yet asked for."""
    with running_server(tmp_path_factory.mktemp("first-hour"), "embedded") as server:
        yield server


@pytest.fixture(scope="module")
def own_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """A JSONL of short code-like texts, and a GPT-2 of random weights saved by ``save_pretrained``
    (config.json, generation_config.json, model.safetensors): what a researcher brings."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("own")
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma"]
    lines = []
    for i in range(1500):
        a, b = rng.sample(words, 2)
        text = f"def {a}_{i}({b}):\n    return {b} * {i % 97} + {a}_{(i * 7) % 50}"
        lines.append(json.dumps({"text": text}))
    dataset = root / DATASET
    dataset.write_text("\n".join(lines) + "\n")
    torch.manual_seed(0)
    sizes = {"n_embd": 32, "n_head": 2, "n_layer": 2, "n_positions": 64, "vocab_size": 300}
    config = GPT2Config(**sizes, bos_token_id=299, eos_token_id=299)
    GPT2LMHeadModel(config).save_pretrained(root / CHECKPOINT)
    return dataset, sorted((root / CHECKPOINT).iterdir())


def keep(page: Page, name: str) -> None:
    """The page as it is, 1280 × 800, into COLLAPIPE_SCREENSHOT_DIR when it is set."""
    folder = os.environ.get("COLLAPIPE_SCREENSHOT_DIR")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def check_and_preflight(page: Page) -> None:
    page.get_by_role("button", name="Check & pre-flight").click()
    expect(page.locator("#preflight")).to_have_attribute("data-state", "modeled", timeout=60_000)
    expect(page.locator(".error-summary")).to_be_hidden()


def launch(page: Page) -> int:
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"), timeout=30_000)
    return int(page.url.rsplit("/", 1)[1])


def test_first_hour(browser: Browser, fresh_server: Server, own_files: tuple[Path, list[Path]]) -> None:
    server = fresh_server
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    guard = RequestGuard(context)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    refused: list[str] = []  # every answer of the API that asked the user to fix something

    def note_refusal(response: Response) -> None:
        if "/api/" in response.url and response.status == 422:
            refused.append(f"{response.request.method} {response.url}: {response.text()[:300]}")

    page.on("response", note_refusal)
    page.goto(f"{server.url}/")
    page.get_by_label("Username").fill(USERNAMES["operator"])
    page.get_by_label("Password").fill(PASSWORDS["operator"])
    page.get_by_role("button", name="Log in").click()

    # no runs yet: the runs list leads to the quickstart; its first pre-flight; 2 rounds
    page.locator("[data-role='no-runs']").get_by_role("link", name="Launch the quickstart").click()
    expect(page.locator("form[data-preset-loaded='quickstart']")).to_be_attached(timeout=30_000)
    page.get_by_label("rounds", exact=True).fill("2")
    check_and_preflight(page)
    quickstart = launch(page)

    # their own data and checkpoint, uploaded on the Data page
    dataset, checkpoint_files = own_files
    page.get_by_role("link", name="Data", exact=True).click()
    expect(page.locator("#data-page[data-ready='true']")).to_be_attached()
    page.get_by_label("File", exact=True).set_input_files(dataset)
    page.locator("form.upload-form").get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator(f"tr[data-name='datasets/{DATASET}']")).to_be_visible()
    page.get_by_label("Folder").select_option("checkpoints")
    page.get_by_label("Checkpoint name (a folder)").fill(CHECKPOINT)
    page.get_by_label("Files", exact=True).set_input_files(checkpoint_files)
    page.locator("form.upload-form").get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator(f"tr[data-name='checkpoints/{CHECKPOINT}']")).to_contain_text("model.safetensors")

    # launched from the causal-LM preset: the checkpoint gives the sizes, the JSONL the texts
    page.goto(f"{server.url}/#/launch?preset=llm-causal")
    expect(page.locator("form[data-preset-loaded='llm-causal']")).to_be_attached(timeout=30_000)
    page.get_by_label("Run name").fill("own gpt2")
    page.get_by_label("pretrained_path: choose from the server's checkpoints").select_option(
        f"checkpoints/{CHECKPOINT}"
    )
    expect(page.get_by_label("d_model", exact=True)).to_have_value("32")
    page.get_by_label("seq_len", exact=True).fill("32")
    page.get_by_label("dataset", exact=True).select_option("files")
    page.get_by_label("set files").check()
    page.get_by_label("train: choose from the server's datasets").select_option(f"datasets/{DATASET}")
    page.get_by_label("samples_per_cluster", exact=True).fill("64")
    page.get_by_label("eval_samples", exact=True).fill("32")
    page.get_by_label("rounds", exact=True).fill("2")
    page.get_by_label("local_iterations", exact=True).fill("1")
    page.get_by_label("lr", exact=True).fill("0.0o3")  # the user's typo: the one thing to fix
    page.get_by_role("button", name="Check & pre-flight").click()
    summary = page.locator(".error-summary")
    expect(summary.locator("li")).to_have_count(1)
    expect(summary).to_contain_text("training.lr")
    assert len(refused) == 1, refused
    page.get_by_label("lr", exact=True).fill("0.003")
    check_and_preflight(page)
    own = launch(page)

    # an analytic study: the V sweep cut to 2 rounds per run
    page.get_by_role("link", name="Studies").click()
    page.get_by_label("Preset").select_option("v-sweep")
    page.get_by_label("Rounds per run").fill("2")
    page.get_by_role("button", name="Launch study").click()
    expect(page).to_have_url(re.compile(r"#/studies/\d+$"), timeout=60_000)
    study = int(page.url.rsplit("/", 1)[1])

    # both runs finish; the run view of their own model
    for run_id in (quickstart, own):
        server.wait_for_run(run_id, ("succeeded",), timeout_s=300)
    page.goto(f"{server.url}/#/runs/{own}")
    expect(page.locator(".page-head .status")).to_have_text("succeeded")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=30_000)
    expect(page.locator("[data-tile='latency']")).not_to_have_text("—")
    keep(page, "run-view")

    # compare against the quickstart, and its CSV
    page.goto(f"{server.url}/#/compare?ids={quickstart},{own}&baseline={quickstart}")
    table = page.locator("#compare-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator(f"tr[data-run-id='{quickstart}']")).to_contain_text("baseline")
    with page.expect_download() as download:
        page.get_by_role("button", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert [int(r["run_id"]) for r in rows] == [quickstart, own]

    # the study's page once every run is done, and its HTML report
    page.goto(f"{server.url}/#/studies/{study}")
    progress = page.locator("#study-progress")
    expect(progress).to_have_attribute("data-status", "succeeded", timeout=300_000)
    cells = page.locator("#study-table tbody tr")
    expect(cells.filter(has_text="3/3")).to_have_count(5, timeout=30_000)  # 5 values of V, 3 seeds each
    expect(page.locator("#study-plot")).to_have_attribute("data-points", "5")
    keep(page, "study-page")
    href = page.locator("a[data-export='html']").get_attribute("href")
    report = page.request.get(f"{server.url}{href}")
    assert report.ok and report.headers["content-type"].startswith("text/html")
    report_page = context.new_page()
    report_page.set_content(report.text())
    expect(report_page.locator(".js-plotly-plot").first).to_be_visible()
    keep(report_page, "study-report")

    assert len(refused) == 1, refused  # the typo's, nothing else
    assert not errors, errors
    context.close()
    assert not guard.outside(), guard.outside()
