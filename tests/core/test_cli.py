"""The command line as a user runs it: exit codes, JSON output, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from collapipe_core.calibration import calibrate
from collapipe_core.cli import app
from collapipe_core.data import load_dataset
from collapipe_core.export import load_model
from collapipe_core.pipeline.quality import evaluate_model
from collapipe_core.validation import load_config
from tests.core.builders import tiny_config

CLI = [sys.executable, "-m", "collapipe_core"]


def _write(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(**sections).model_dump(mode="json", by_alias=True)))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def test_run_json_prints_a_round_per_line_and_a_summary(tmp_path: Path) -> None:
    config = _write(tmp_path, executor="analytic", training={"rounds": 3})
    done = _run("run", str(config), "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["round"]["round"] for line in lines[:-1]] == [0, 1, 2]
    assert lines[-1]["summary"]["rounds_done"] == 3


def test_bad_config_exits_2_with_one_clear_message_and_no_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["channel"]["bandwidth_hz"] = -1
    path.write_text(yaml.safe_dump(data))
    for command in (["run", str(path)], ["config", "validate", str(path)], ["schedule", str(path)]):
        done = _run(*command)
        assert done.returncode == 2
        assert "channel.bandwidth_hz" in done.stderr and "greater than 0" in done.stderr
        assert "Traceback" not in done.stderr


def test_resume_continues_the_records_file(tmp_path: Path) -> None:
    config = _write(tmp_path, executor="analytic", training={"rounds": 4})
    out = tmp_path / "out"
    assert _run("run", str(config), "--out", str(out), "--rounds", "2").returncode == 0
    done = _run("run", str(config), "--out", str(out), "--rounds", "4", "--resume")
    assert done.returncode == 0, done.stderr
    rounds = [json.loads(line)["round"]["round"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert rounds == [0, 1, 2, 3]


def test_config_schema_is_json_schema() -> None:
    done = _run("config", "schema")
    schema = json.loads(done.stdout)
    assert {"network", "channel", "model", "data", "training", "scheduler", "executor"} <= set(
        schema["properties"]
    )


def _lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines()]


def _without_solve_times(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines without the solver's wall-clock time (the one figure two runs do not share)."""
    return [
        line | {"round": line["round"] | {"solve_time_s": None}} if "round" in line else line
        for line in lines
    ]


def test_schedule_json_prints_what_run_json_prints_for_the_analytic_executor(tmp_path: Path) -> None:
    """One shape for scripts: a {"round", "devices"} object per round, then {"summary"}."""
    config = _write(tmp_path)  # a simulated config: schedule trains nothing all the same
    scheduled = CliRunner().invoke(
        app, ["schedule", str(config), "--policy", "proportional", "--rounds", "3", "--json"]
    )
    assert scheduled.exit_code == 0, scheduled.output
    lines = _lines(scheduled.stdout)
    assert [sorted(line) for line in lines] == [["devices", "round"]] * 3 + [["summary"]]
    assert [line["round"]["round"] for line in lines[:-1]] == [0, 1, 2]
    record = lines[1]["round"]
    for key in ("policy", "objective", "latency_s", "redistribution_s", "blocks_moved", "decision"):
        assert key in record
    assert record["policy"] == "proportional" and record["train_loss"] is None
    device = record["decision"]["clusters"][0]["devices"][0]
    assert set(device) == {"device", "num_blocks", "bandwidth_share", "power_w"}
    assert {d["device_id"] for d in lines[1]["devices"]} == {f"c{n}-d{k}" for n in range(2) for k in range(3)}
    assert {"queue", "energy_j", "memory_bytes"} <= set(lines[1]["devices"][0])
    assert lines[-1]["summary"]["rounds_done"] == lines[-1]["summary"]["total_rounds"] == 3

    ran = CliRunner().invoke(
        app,
        ["run", str(config), "--executor", "analytic", "--policy", "proportional", "--rounds", "3", "--json"],
    )
    assert ran.exit_code == 0, ran.output
    assert _without_solve_times(lines) == _without_solve_times(_lines(ran.stdout))


def test_tables_and_lines_keep_their_width_when_the_output_is_not_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: CliRunner's output is not a terminal, as in a pipe or a file; nothing is folded or
    cut to 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    path = _write(tmp_path, training={"rounds": 1, "local_iterations": 1})
    done = CliRunner().invoke(app, ["run", str(path)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    rounds = next(line for line in lines if "latency s" in line)
    for header in ("round", "latency s", "max makespan s", "energy J", "train loss", "eval loss", "accuracy"):
        assert header in rounds
    devices = next(line for line in lines if "profile" in line)
    for header in ("device", "blocks", "energy J/round", "budget J", "peak MiB", "capacity MiB"):
        assert header in devices
    assert "…" not in done.stdout

    scheduled = CliRunner().invoke(app, ["schedule", str(path), "--rounds", "2"])
    assert scheduled.exit_code == 0, scheduled.output
    lines = scheduled.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["round", "0"], ["round", "1"]]
    assert all("blocks [[" in line and line.endswith("]]") for line in lines)


def test_calibrate_writes_the_measured_noise_scale_into_a_valid_config(tmp_path: Path) -> None:
    """In-process (one torch thread, no interpreter start-up): the command trains 3 short rounds."""
    path = _write(tmp_path, executor="analytic")
    original = path.read_text()
    out = tmp_path / "calibrated.yaml"
    done = CliRunner().invoke(app, ["calibrate", str(path), "--rounds", "3", "--output", str(out)])
    assert done.exit_code == 0, done.output
    assert path.read_text() == original  # --output: the config itself is left alone

    written = load_config(out)
    value = written.scheduler.gradient_noise_scale
    assert value is not None and value > 0
    assert f"B_noise = {value:.4g} samples" in done.stdout
    assert value == calibrate(load_config(path), rounds=3).gradient_noise_scale  # what was measured
    # nothing else changed: still an analytic run, now with the measured B_noise
    unset = written.scheduler.model_copy(update={"gradient_noise_scale": None})
    assert written.model_copy(update={"scheduler": unset}) == load_config(path)

    # without --output the config itself is rewritten
    assert CliRunner().invoke(app, ["calibrate", str(path), "--rounds", "3"]).exit_code == 0
    assert load_config(path).scheduler.gradient_noise_scale == value


def test_calibrate_refuses_a_single_micro_batch_and_changes_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path)
    original = path.read_text()
    done = CliRunner().invoke(app, ["calibrate", str(path), "--microbatches", "1"])
    assert done.exit_code == 2
    assert "at least 2 micro-batches" in done.output and "Traceback" not in done.output
    assert path.read_text() == original


def test_run_out_writes_the_trained_model_at_the_end(tmp_path: Path) -> None:
    """In-process: --out DIR holds DIR/model/ after the run, and it evaluates to the last eval loss."""
    path = _write(tmp_path, training={"rounds": 2, "local_iterations": 1})
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "--json"])
    assert done.exit_code == 0, done.output
    last = [json.loads(line) for line in done.stdout.splitlines()][-2]["round"]
    model = load_model(out / "model")
    config = load_config(path)
    bundle = load_dataset(config)
    loss, _ = evaluate_model(
        model, bundle.eval, pad_id=bundle.pad_id, bos_id=bundle.bos_id, eos_id=bundle.eos_id
    )
    assert abs(loss - last["eval_loss"]) <= 1e-5 and last["round"] == 1
    assert f"model: {out / 'model'}" in done.stderr

    analytic = _write(tmp_path, executor="analytic", training={"rounds": 1})
    done = CliRunner().invoke(app, ["run", str(analytic), "--out", str(out), "--json"])
    assert done.exit_code == 0, done.output
    assert not (out / "model").exists()  # replaced with the rest of DIR, and nothing to write
    assert "the analytic executor trains no weights" in done.stderr
