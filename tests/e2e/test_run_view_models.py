"""The run view says what the run's model and decisions are: a decoder-only GPT-2's TEBs are its
decoder's layers (no encoder, no seq2seq figures), and the devices that recompute their activations
are marked where their segments are shown (decision log, current cut, Gantt). One short analytic run
of both; the deployment does not matter to any of it: embedded only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]


def recomputing_gpt2() -> dict[str, Any]:
    """A tiny GPT-2 under DSSDA with activation_checkpointing auto, on devices whose memory holds its
    four TEBs only with recomputation (sequences of 64 tokens): the devices that hold them recompute,
    the others hold nothing."""
    config = tiny(rounds=2, executor="analytic", policy="dssda")
    config["model"] = {
        "source": "transformers", "architecture": "gpt2",
        "d_model": 16, "num_heads": 2, "ffn_dim": 32, "num_blocks": 4, "seq_len": 64,
    }  # fmt: skip
    config["data"] = {
        "dataset": "pydoc-topics", "tokenizer": {"kind": "bpe", "vocab_size": 300},
        "samples_per_cluster": 32, "eval_samples": 16,
    }  # fmt: skip
    config["training"]["activation_checkpointing"] = "auto"
    for profile, extra in zip(config["network"]["profiles"], (1.0e6, 0.9e6, 0.8e6, 2.0e6), strict=True):
        profile["memory_bytes"] = int(64.0e6 + extra)
    return config


@pytest.fixture(scope="module")
def run_id(server: Server) -> Iterator[int]:
    launched = server.launch(recomputing_gpt2(), name="gpt2 recomputing")
    run = server.wait_for_run(launched, ("succeeded", "failed"), timeout_s=180)
    assert run["status"] == "succeeded", run["error"]
    yield launched


def test_a_recomputing_decoder_only_gpt2_is_shown_as_one(login: Login, server: Server, run_id: int) -> None:
    with server.client() as client:
        items = client.get(f"/api/runs/{run_id}/decisions").raise_for_status().json()["items"]
    page = login("viewer")
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=15_000)

    # a decoder-only model: its TEBs are its decoder's layers
    expect(page.locator("main > p.small.muted").first).to_contain_text("gpt2 causal_lm")
    segments = page.locator("section.chart-panel", has=page.locator("#chart-cut"))
    expect(segments.get_by_role("heading")).to_have_text("Current cut of the decoder")
    expect(segments).to_contain_text("The decoder's TEBs by device (in pipeline order) in round 1")
    assert (
        page.evaluate("document.getElementById('chart-cut').layout.xaxis.title.text")
        == "TEBs (decoder order)"
    )
    expect(page.locator("#chart-segments").locator("xpath=..")).not_to_contain_text("encoder")
    # its eval figures: next-token accuracy and perplexity, no error rate of seq2seq decoding
    evaluation = page.locator("section.chart-panel", has=page.locator("#chart-eval"))
    expect(evaluation).to_contain_text("next-token accuracy")
    expect(evaluation).not_to_contain_text("seq2seq")
    assert page.evaluate("document.getElementById('chart-eval').data.map(t => t.name)") == ["eval_accuracy"]
    expect(page.locator("#chart-perplexity")).to_be_attached()

    # the devices that recompute their activations
    again = {
        item["round"]: sorted(
            d["device"] for c in item["decision"]["clusters"] for d in c["devices"] if d.get("recompute")
        )
        for item in items
    }
    cells = {  # "0 0 0 4↻ / 0 0 0 4↻"
        item["round"]: " / ".join(
            " ".join(f"{d['num_blocks']}{'↻' if d.get('recompute') else ''}" for d in c["devices"])
            for c in item["decision"]["clusters"]
        )
        for item in items
    }
    # the scenario this test is written for: in the newest round some devices of each cluster
    # recompute, and some hold TEBs without recomputing or hold none (no mark)
    newest = max(again)
    assert {device.split("-")[0] for device in again[newest]} == {"c0", "c1"}, again
    assert cells[newest].count("↻") == len(again[newest]) < 8, cells

    # the decision log: each round's segments, ↻ on the devices that recompute
    for round_index, devices in again.items():
        row = page.locator(f"#decisions tr[data-round='{round_index}']")
        expect(row.locator("[data-segments]")).to_have_text(cells[round_index])
        marked = row.locator("[data-recompute]")
        expect(marked).to_have_count(len(devices))
        assert sorted(marked.evaluate_all("els => els.map(e => e.dataset.recompute)")) == devices
        if devices:
            expect(row.locator(f"[data-recompute='{devices[0]}']")).to_have_attribute(
                "title",
                f"{devices[0]} recomputes its activations in backward (its backward runs the forward again)",
            )

    # the current cut (the newest round): a bar per device index, ↻ on those that recompute
    decision = next(item["decision"] for item in items if item["round"] == newest)
    expected = [
        {
            "name": f"device {k}",
            "text": [f"d{k}: {c['devices'][k]['num_blocks']}{'↻' if c['devices'][k].get('recompute') else ''}"
                     for c in decision["clusters"]],
            "marked": [bool(c["devices"][k].get("recompute")) for c in decision["clusters"]],
        }
        for k in range(len(decision["clusters"][0]["devices"]))
    ]  # fmt: skip
    cut = page.evaluate(
        "document.getElementById('chart-cut').data"
        ".map(t => ({name: t.name, text: Array.from(t.text), note: Array.from(t.customdata)}))"
    )
    assert [{"name": t["name"], "text": t["text"]} for t in cut] == [
        {"name": e["name"], "text": e["text"]} for e in expected
    ], cut
    assert [[note.startswith("<br>↻ recomputes") for note in t["note"]] for t in cut] == [
        e["marked"] for e in expected
    ], cut
    expect(page.locator("section.chart-panel", has=page.locator("#chart-cut"))).to_contain_text(
        "↻: the device recomputes"
    )

    # the Gantt (the newest round, cluster 0): the backward bars of the devices that recompute say
    # they include the forward again
    shown = [d for d in again[newest] if d.startswith("c0-")]
    gantt = page.locator("#chart-gantt")
    expect(gantt).to_have_attribute("data-round", str(newest))
    expect(gantt).to_have_attribute("data-recomputing", " ".join(shown))
    verb = "recomputes its" if len(shown) == 1 else "recompute their"
    expect(page.locator("#gantt")).to_contain_text(f"↻ {', '.join(shown)} {verb} activations in backward")
    backward = page.evaluate(
        "(() => { const t = document.getElementById('chart-gantt').data.find(d => d.name === 'backward');"
        " return Array.from(t.y).map((p, i) => [p, t.customdata[i][6]]); })()"
    )
    assert {p for p, note in backward if note} == set(shown), backward
    assert all(note == " (↻ with the forward again)" for p, note in backward if p in shown), backward
    page.locator("#decisions").scroll_into_view_if_needed()
    screenshot(page, "run-recompute-marked")
