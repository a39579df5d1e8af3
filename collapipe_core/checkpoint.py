"""Per-round checkpoints: everything a run needs to continue at round k exactly as if never stopped.

A checkpoint holds the next round index, the virtual queues, the executor's state (global weights
and each cluster's optimizer state), torch's RNG state, the placement the last round left (segments,
rates, powers: the next round charges the TEBs that change device) and a fingerprint of the config.

``write_checkpoint`` writes a file through a temporary file of the writer's own (a unique name beside
it), fsyncs it and renames it over the target: a crash mid-write leaves the previous file intact, and
two processes writing the same target never write into one file. A file that cannot be written
raises ``OSError`` naming it.

Where a ``Runner`` keeps its checkpoints is a ``Checkpoints``: ``DirectoryCheckpoints`` is the CLI's
(``checkpoint.pt`` in ``--out``); the service names one file per attempt in its database
(backend.runtime.checkpoints).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.faults import crash_point

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1
TEMPORARY_SUFFIX = ".tmp"


def config_fingerprint(config: ExperimentConfig) -> str:
    """Hash of everything that shapes the run's results except the number of rounds."""
    data = config.model_dump(mode="json", by_alias=True)
    data["training"].pop("rounds", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class Checkpoints(Protocol):
    """Where a run's latest checkpoint is kept."""

    def load(self) -> dict[str, Any] | None:
        """The latest checkpoint, or None when there is none."""

    def save(self, payload: dict[str, Any]) -> None:
        """Keep ``payload`` as the latest checkpoint."""


@dataclass(frozen=True)
class DirectoryCheckpoints:
    """``checkpoint.pt`` in ``directory`` (the CLI's ``--out``)."""

    directory: Path

    def load(self) -> dict[str, Any] | None:
        return load_checkpoint(self.directory)

    def save(self, payload: dict[str, Any]) -> None:
        save_checkpoint(self.directory, payload)

    def __str__(self) -> str:
        return str(self.directory)


def write_checkpoint(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``path`` whole or not at all (see the module's docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMPORARY_SUFFIX}")
    try:
        with tmp.open("wb") as fh:  # opened here, not by torch: an OSError names the file
            torch.save({"format_version": FORMAT_VERSION, **payload}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        crash_point("checkpoint-write", payload.get("next_round"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)  # the new name survives a power loss
    return path


def read_checkpoint(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint in file ``path``; ValueError for a format this code does not read. ``mmap``: the
    tensors are mapped from the file, read only where they are used (a reader that needs the weights
    but not the optimizer states)."""
    payload: dict[str, Any] = torch.load(path, weights_only=False, mmap=mmap)
    if payload.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {payload.get('format_version')} is not {FORMAT_VERSION}")
    return payload


def save_checkpoint(directory: str | Path, payload: dict[str, Any]) -> Path:
    return write_checkpoint(Path(directory) / CHECKPOINT_NAME, payload)


def load_checkpoint(directory: str | Path) -> dict[str, Any] | None:
    """The checkpoint in ``directory``, or None when there is none."""
    path = Path(directory) / CHECKPOINT_NAME
    return read_checkpoint(path) if path.is_file() else None


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
