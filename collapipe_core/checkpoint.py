"""Per-round checkpoints: everything a run needs to continue at round k exactly as if never stopped.

A checkpoint holds the next round index, the virtual queues, the executor's state (global weights
and each cluster's optimizer state), torch's RNG state, the placement the last round left (segments,
rates, powers: the next round charges the TEBs that change device) and a fingerprint of the config.
It is written to a temporary file and renamed, so a crash mid-write leaves the previous checkpoint
intact.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.faults import crash_point

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


def config_fingerprint(config: ExperimentConfig) -> str:
    """Hash of everything that shapes the run's results except the number of rounds."""
    data = config.model_dump(mode="json", by_alias=True)
    data["training"].pop("rounds", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def save_checkpoint(directory: str | Path, payload: dict[str, Any]) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / CHECKPOINT_NAME
    tmp = directory / (CHECKPOINT_NAME + ".tmp")
    torch.save({"format_version": FORMAT_VERSION, **payload}, tmp)
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    crash_point("checkpoint-write", payload.get("next_round"))
    os.replace(tmp, final)
    return final


def load_checkpoint(directory: str | Path) -> dict[str, Any] | None:
    """The latest checkpoint in ``directory``, or None when there is none."""
    path = Path(directory) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    payload: dict[str, Any] = torch.load(path, weights_only=False)
    if payload.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {payload.get('format_version')} is not {FORMAT_VERSION}")
    return payload
