"""Small configs for core tests that build in milliseconds."""

from __future__ import annotations

from typing import Any

from collapipe_core.config import ExperimentConfig
from collapipe_core.validation import parse_config


def tiny_config(**sections: Any) -> ExperimentConfig:
    """A two-cluster, three-device synthetic config; ``sections`` update the dict before parsing."""
    data: dict[str, Any] = {
        "name": "tiny",
        "seed": 3,
        "executor": "simulated",
        "network": {"num_clusters": 2, "devices_per_cluster": 3, "energy_budget_j": 0.05},
        "model": {
            "kind": "classifier",
            "d_model": 16,
            "num_heads": 2,
            "ffn_dim": 32,
            "num_blocks": 4,
            "seq_len": 12,
        },
        "data": {"dataset": "synthetic-parity", "samples_per_cluster": 64, "eval_samples": 64},
        "training": {"rounds": 6, "local_iterations": 2, "microbatch_size": 4, "lr": 0.01},
        "scheduler": {"policy": "uniform", "num_microbatches": 2, "max_microbatches": 4},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_config(data)
