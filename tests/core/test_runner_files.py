"""A run end to end on the user's own files: each task kind from JSONL, CSV and Parquet, through the
CLI's loader and the runner (one round of real training on a tiny model)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from collapipe_core.cli import app

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


def _rows(kind: str) -> list[dict[str, Any]]:
    rows = []
    for i in range(160):
        a, b = WORDS[i % len(WORDS)], WORDS[(3 * i + 1) % len(WORDS)]
        if kind == "classifier":
            rows.append({"text": f"{a} {b} number {i}", "label": ["greek", "letter"][i % 2]})
        elif kind == "seq2seq":
            rows.append({"source": f"{a} {b}", "target": f"{b} {a}"})
        else:
            rows.append({"text": f"The {a} comes before the {b}, said text {i}."})
    long = " ".join(WORDS * 3)  # longer than seq_len: cut (and counted) unless it is causal LM text
    rows[0] = {**rows[0], **({"source": long} if kind == "seq2seq" else {"text": long})}
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)


MODELS = {
    "classifier": {"source": "transformers", "architecture": "bert"},
    "seq2seq": {"source": "builtin", "kind": "seq2seq", "num_decoder_layers": 1, "target_len": 12},
    "causal_lm": {"source": "transformers", "architecture": "gpt2"},
}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize("kind", ["classifier", "seq2seq", "causal_lm"])
def test_a_run_trains_on_the_users_files(tmp_path: Path, kind: str, suffix: str) -> None:
    data_file = tmp_path / f"train{suffix}"
    _write(data_file, _rows(kind))
    config = {
        "seed": 1,
        "executor": "simulated",
        "network": {
            "num_clusters": 2,
            "devices_per_cluster": 2,
            "memory_bytes": {"low": 1.0e9, "high": 2.0e9},
        },
        "model": {
            **MODELS[kind],
            "d_model": 16,
            "num_heads": 2,
            "ffn_dim": 32,
            "num_blocks": 2,
            "seq_len": 10,
        },
        "data": {
            "dataset": "files",
            "files": {"train": str(data_file)},
            "tokenizer": {"kind": "bpe", "vocab_size": 120},
            "samples_per_cluster": 16,
            "eval_samples": 8,
        },
        "training": {"rounds": 1, "local_iterations": 1, "microbatch_size": 4},
        "scheduler": {"policy": "uniform", "num_microbatches": 2, "max_microbatches": 2},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["run", str(path), "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    record = lines[0]["round"]
    assert record["train_loss"] > 0 and record["eval_loss"] > 0
    if kind == "causal_lm":
        assert "eval_perplexity" in record["eval_metrics"]
    truncated = lines[-1]["summary"]["data_truncated_rows"]
    assert truncated == (0 if kind == "causal_lm" else 1)  # causal LM text is cut into windows instead
