"""LoRA at the edge from the browser: the llama-lora-edge preset launched from the form (one round),
its pre-flight showing the trainable and frozen parameters and the memory of each device by part, and
its "Download model" archive loaded with peft from local files."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Login
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e

PRESET = "llama-lora-edge"
MEMORY_PARTS = ["weights", "gradients", "optimizer state", "activations and buffers", "runtime", "capacity"]


def _trace_names(page: Page, title: str) -> list[str]:
    """The trace names of the pre-flight chart under the heading ``title``."""
    chart = page.locator("#preflight h3", has_text=title).locator("xpath=following-sibling::div[1]")
    return chart.evaluate("el => el.data.map((trace) => trace.name)")  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.deployments("embedded")
@pytest.mark.filterwarnings(
    "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"
)  # peft 0.21's call
def test_the_lora_preset_launches_from_the_form_and_its_model_loads_with_peft(
    login: Login, server: Server, tmp_path: Path
) -> None:
    page = login("operator")
    page.goto(f"{server.url}/#/launch")
    expect(page.locator("form[data-ready='true']")).to_be_attached(timeout=60_000)
    page.get_by_label("Preset").select_option(PRESET)
    expect(page.locator(f"form[data-preset-loaded='{PRESET}']")).to_be_attached(timeout=60_000)
    page.locator(".field[data-path='training.rounds'] input").fill("1")
    page.get_by_label("Run name").fill("lora from the form")

    page.get_by_role("button", name="Check & pre-flight").click()
    preflight = page.locator("#preflight")
    expect(preflight).to_have_attribute("data-state", "modeled", timeout=60_000)
    parameters = preflight.locator("[data-role='parameters']")
    expect(parameters).to_contain_text("Trainable parameters")
    expect(parameters).to_contain_text("Frozen parameters")
    expect(parameters).to_contain_text("bf16")
    trainable, frozen = (
        float(parameters.locator(".tile-value").nth(i).inner_text().replace(",", "")) for i in (0, 1)
    )
    assert 0 < trainable < frozen  # the adapters train, the base is frozen
    recomputing = int(parameters.locator(".tile-value").nth(2).inner_text())
    assert recomputing >= 1  # the preset's devices cannot hold LoRA's activations without recomputation
    assert _trace_names(page, "Memory per device") == MEMORY_PARTS

    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_role("heading", name="lora from the form")).to_be_visible(timeout=30_000)
    run_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator(".page-head .status")).to_have_text("succeeded", timeout=240_000)

    with page.expect_download() as started:
        page.get_by_role("button", name=f"Download model of run {run_id}").click()
    with tarfile.open(started.value.path()) as tar:
        tar.extractall(tmp_path, filter="data")
    folder = tmp_path / f"run-{run_id}-model"
    assert json.loads((folder / "collapipe.json").read_text())["weights"] == "adapter"

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(folder / "base", local_files_only=True)
    model = PeftModel.from_pretrained(base, folder, local_files_only=True)
    adapters = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    assert adapters and all(
        name.split(".")[-4] in {"q_proj", "k_proj", "v_proj", "o_proj"} for name in adapters
    )
    assert any(bool(p.abs().sum() > 0) for p in adapters.values())  # B starts at 0: a round trained them
    with torch.no_grad():
        logits = model(torch.arange(1, 17).unsqueeze(0)).logits
    assert logits.shape == (1, 16, base.config.vocab_size) and bool(torch.isfinite(logits).all())
