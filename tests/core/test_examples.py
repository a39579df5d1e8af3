"""The example configs do what their comments say (the rest of their checks: test_validation.py)."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collapipe_core import api
from collapipe_core.cli import app
from collapipe_core.validation import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_llama_7b_fits_the_devices_only_when_split() -> None:
    """LLaMA-2-7B (profile measured on meta tensors: nothing allocated) over phones to laptops: every
    DSSDA round is feasible and uses its memory, while `fl` (the whole model per device) fits none."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    config = api.load_config(EXAMPLES / "llama-7b-analytic.yaml")
    assert config.executor == "analytic" and config.training.precision == "bf16"
    rows = api.schedule_rounds(config, config.training.rounds)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grew < 2 * 2**30, (
        f"the 7B profile must not allocate the model's 13 GB (peak grew {grew / 2**20:.0f} MiB)"
    )
    assert [r["feasible"] for r in rows] == [True] * config.training.rounds
    env = api.environment(config)
    assert env.profile.total_params == 6_738_415_616 and env.profile.num_blocks == 32
    for row in rows:
        for cluster in row["decision"]["clusters"]:
            blocks = [device["num_blocks"] for device in cluster["devices"]]
            assert sum(blocks) == 32 and max(blocks) < 32  # cut into segments
        capacity = env.scenario.memory_bytes.ravel()
        assert all(m <= c for m, c in zip(row["memory_bytes"].values(), capacity, strict=True))
    fl = api.schedule_rounds(
        api.load_config(EXAMPLES / "llama-7b-analytic.yaml", {"scheduler.policy": "fl"}), 1
    )
    assert not fl[0]["feasible"] and any("needs" in v and "MiB" in v for v in fl[0]["violations"])


def test_phones_fine_tune_llama_7b_only_with_lora_and_recomputation_where_memory_needs_it() -> None:
    """LLaMA-2-7B with LoRA (r 16 on q/k/v/o), bf16 and recomputation chosen per phone: every DSSDA round
    is feasible and some phones recompute while others do not; full fine-tuning is refused at validation
    and LoRA without recomputation finds no placement."""
    path = EXAMPLES / "llama-7b-lora-analytic.yaml"
    config = api.load_config(path)
    rows = api.schedule_rounds(config, config.training.rounds)
    assert [r["feasible"] for r in rows] == [True] * config.training.rounds
    flags = [
        [bool(device.get("recompute")) for device in cluster["devices"] if device["num_blocks"] > 0]
        for cluster in rows[-1]["decision"]["clusters"]
    ]
    assert all(any(row) and not all(row) for row in flags), flags
    with pytest.raises(ConfigError, match=r"network\.memory_bytes"):
        api.load_config(path, {"training.peft": None})
    plain = api.load_config(path, {"training.activation_checkpointing": "none"})
    with pytest.raises(ValueError, match="no placement fits in memory"):
        api.schedule_rounds(plain, 1)


@pytest.mark.slow
def test_the_llm_example_trains_with_falling_eval_loss_and_reports_perplexity() -> None:
    """`collapipe run examples/llm-causal.yaml` (4 of its 30 rounds here)."""
    result = CliRunner().invoke(app, ["run", str(EXAMPLES / "llm-causal.yaml"), "--rounds", "4", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    rounds = [line["round"] for line in lines if "round" in line]
    assert len(rounds) == 4
    losses = [r["eval_loss"] for r in rounds]
    assert losses[-1] < losses[0] - 0.3, losses
    perplexities = [r["eval_metrics"]["eval_perplexity"] for r in rounds]
    assert perplexities == pytest.approx([2.718281828459045**loss for loss in losses], rel=1e-6)
    summary = lines[-1]["summary"]
    assert summary["final_eval"]["eval_perplexity"] == pytest.approx(perplexities[-1])
