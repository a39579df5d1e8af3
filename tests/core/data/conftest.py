"""Config builders and file writers shared by the data tests (fixtures, so no test imports conftest)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collapipe_core.config import DataConfig, DataFiles, ExperimentConfig, ModelConfig, NetworkConfig

KINDS = {
    "cmudict": "seq2seq",
    "synthetic-reverse": "seq2seq",
    "django-langid": "classifier",
    "synthetic-parity": "classifier",
    "pydoc-topics": "causal_lm",
}
CAUSAL_LM_MODEL = {"source": "transformers", "architecture": "gpt2"}

MakeConfig = Callable[..., ExperimentConfig]


def _make_config(
    dataset: str = "synthetic-reverse",
    *,
    seed: int = 0,
    num_clusters: int = 2,
    model: dict[str, Any] | None = None,
    **data: Any,
) -> ExperimentConfig:
    """A small experiment config for ``dataset`` with the matching model kind."""
    data.setdefault("samples_per_cluster", 64)
    data.setdefault("eval_samples", 32)
    kind = {"kind": KINDS[dataset]} if KINDS[dataset] != "causal_lm" else CAUSAL_LM_MODEL
    return ExperimentConfig(
        seed=seed,
        model=ModelConfig(**{**kind, **(model or {})}),
        data=DataConfig(dataset=dataset, **data),
        network=NetworkConfig(num_clusters=num_clusters),
    )


@pytest.fixture
def make_config() -> MakeConfig:
    return _make_config


WriteRows = Callable[[list[dict[str, Any]], str], str]
MakeFilesConfig = Callable[..., ExperimentConfig]


def _write_rows(directory: Path, rows: list[dict[str, Any]], name: str) -> str:
    """``rows`` written as ``name`` (.jsonl, .csv or .parquet by its suffix); returns the path."""
    path = directory / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif name.endswith(".csv"):
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture
def write_rows(tmp_path: Path) -> WriteRows:
    return lambda rows, name: _write_rows(tmp_path, rows, name)


def _files_config(
    kind: str,
    train: str,
    *,
    eval: str | None = None,
    files: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    seed: int = 0,
    num_clusters: int = 2,
    **data: Any,
) -> ExperimentConfig:
    """A config for the user's files (local paths) with a ``kind`` model; small sizes by default."""
    data.setdefault("samples_per_cluster", 40)
    data.setdefault("eval_samples", 20)
    data.setdefault("tokenizer", {"vocab_size": 64})
    base = CAUSAL_LM_MODEL if kind == "causal_lm" else {"kind": kind}
    return ExperimentConfig(
        seed=seed,
        model=ModelConfig(**{**base, "seq_len": 12, "target_len": 8, **(model or {})}),
        data=DataConfig(dataset="files", files=DataFiles(train=train, eval=eval, **(files or {})), **data),
        network=NetworkConfig(num_clusters=num_clusters),
    )


@pytest.fixture
def make_files_config() -> MakeFilesConfig:
    return _files_config
