"""Small, fast experiment configs for the browser tests, shaped like examples/quickstart.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PRESETS = Path(__file__).resolve().parents[2] / "frontend" / "presets"

# what the launch test types into the form over the quickstart preset: seconds instead of a minute
TINY_OVERRIDES: dict[str, str] = {
    "training.rounds": "30",
    "training.local_iterations": "1",
    "training.microbatch_size": "8",
    "model.d_model": "16",
    "model.num_heads": "2",
    "model.ffn_dim": "32",
    "data.samples_per_cluster": "64",
    "data.eval_samples": "32",
}


def quickstart() -> dict[str, Any]:
    config: dict[str, Any] = json.loads((PRESETS / "quickstart.json").read_text(encoding="utf-8"))
    return config


def tiny(rounds: int, executor: str = "simulated", **scheduler: Any) -> dict[str, Any]:
    """The quickstart with TINY_OVERRIDES applied (and ``rounds``, ``executor``, scheduler fields;
    the policy is uniform unless given: the shared runs' rounds all use the same micro-batches)."""
    config = quickstart()
    for dotted, text in TINY_OVERRIDES.items():
        section, field = dotted.split(".")
        config[section][field] = int(text)
    config["training"]["rounds"] = rounds
    # TINY_OVERRIDES set a fixed micro-batch (training.microbatch_size): the quickstart's fixed batch
    # (training.batch_size) is the other reading of micro-batching, and a config sets one of them
    config["training"].pop("batch_size", None)
    config["executor"] = executor
    config["scheduler"].update({"policy": "uniform", **scheduler})
    return config
