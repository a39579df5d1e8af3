"""`collapipe remote`: submit, ls, watch, export of runs and of studies against a real server; errors
exit 2 with the reason.

The submitted run (or study) is held, then released to the deployment's executor while ``watch``
follows it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tarfile
import threading
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
import yaml
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from backend.remote import remote_app
from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from backend.settings import Settings
from tests.backend.builders import tiny_config
from tests.backend.conftest import RecordingDispatcher, add_user
from tests.backend.live_server import serve

runner = CliRunner()


@pytest.fixture
def server(
    app_factory: Callable[..., FastAPI],
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[RecordingDispatcher]:
    _, token = add_user(session_factory, "op", "operator")
    dispatcher = RecordingDispatcher()
    with serve(app_factory(dispatcher)) as url:
        monkeypatch.setenv("COLLAPIPE_SERVER", url)
        monkeypatch.setenv("COLLAPIPE_TOKEN", token)
        yield dispatcher


def _config_file(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_config(**sections)))
    return path


def test_submit_ls_watch_export(server: RecordingDispatcher, tmp_path: Path) -> None:
    submitted = runner.invoke(remote_app, ["submit", str(_config_file(tmp_path)), "--json"])
    assert submitted.exit_code == 0, submitted.output
    run_id = json.loads(submitted.stdout)["run_id"]
    listed = runner.invoke(remote_app, ["ls", "--json"])
    assert [r["id"] for r in json.loads(listed.stdout)] == [run_id]

    worker = threading.Timer(0.5, server.release)  # the run starts while watch is following it
    worker.start()
    watched = runner.invoke(remote_app, ["watch", str(run_id)])
    worker.join()
    assert watched.exit_code == 0, watched.output
    assert f"run {run_id}: succeeded (5/5 rounds)" in watched.stdout
    out = tmp_path / "rounds.parquet"
    exported = runner.invoke(remote_app, ["export", str(run_id), "--format", "parquet", "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    assert pq.read_table(out).num_rows == 5


def test_a_bad_config_is_refused_by_the_server_naming_the_field(
    server: RecordingDispatcher, tmp_path: Path
) -> None:
    result = runner.invoke(remote_app, ["submit", str(_config_file(tmp_path, seed=-1))])
    assert result.exit_code == 2 and "422 from /api/runs" in result.output and "seed" in result.output
    assert server.enqueued == []


GPT2_CONFIG = {
    "model_type": "gpt2",
    "n_embd": 32,
    "n_head": 2,
    "n_layer": 4,
    "n_positions": 64,
    "vocab_size": 300,
}


def _own_checkpoint_config(tmp_path: Path, pretrained_path: str) -> Path:
    """A config naming a checkpoint by its name in the server's data directory, without the sizes
    (the checkpoint has them) and with a comment."""
    data = tiny_config(data={"dataset": "pydoc-topics", "samples_per_cluster": 64, "eval_samples": 64})
    data["model"] = {
        "source": "transformers",
        "architecture": "gpt2",
        "pretrained_path": pretrained_path,
        "seq_len": 12,
    }
    path = tmp_path / "own.yaml"
    path.write_text("# sizes come from the checkpoint\n" + yaml.safe_dump(data))
    return path


@pytest.mark.deployments("embedded")  # the server validates: one code on both
def test_submit_sends_the_file_as_written_and_the_server_reads_its_own_data_directory(
    server: RecordingDispatcher, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = settings.data_dir / "checkpoints" / "tiny-gpt2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text(json.dumps(GPT2_CONFIG))
    path = _own_checkpoint_config(tmp_path, "checkpoints/tiny-gpt2")
    monkeypatch.chdir(tmp_path)  # no checkpoints/tiny-gpt2 here: only the server has it
    sent: list[Any] = []
    request = httpx.Client.request

    def spy(self: httpx.Client, method: str, url: Any, **kwargs: Any) -> httpx.Response:
        if method == "POST":
            sent.append(kwargs.get("json"))
        return request(self, method, url, **kwargs)

    monkeypatch.setattr(httpx.Client, "request", spy)
    submitted = runner.invoke(remote_app, ["submit", str(path), "--rounds", "2", "--json"])
    assert submitted.exit_code == 0, submitted.output
    run_id = json.loads(submitted.stdout)["run_id"]
    # the parsed file and --rounds, nothing filled in or defaulted locally
    written = yaml.safe_load(path.read_text())
    assert sent == [{"config": written | {"training": written["training"] | {"rounds": 2}}}]
    # the server filled the sizes from its own copy of the checkpoint
    with httpx.Client(base_url=os.environ["COLLAPIPE_SERVER"], headers=_bearer()) as client:
        run = client.get(f"/api/runs/{run_id}").raise_for_status().json()
    assert run["total_rounds"] == 2
    assert (run["config"]["model"]["d_model"], run["config"]["model"]["num_blocks"]) == (32, 4)


def _bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ['COLLAPIPE_TOKEN']}"}


@pytest.mark.deployments("embedded")  # the server validates: one code on both
def test_a_checkpoint_the_server_lacks_is_named_once(
    server: RecordingDispatcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _own_checkpoint_config(tmp_path, "openai-community/gpt2")
    result = runner.invoke(remote_app, ["submit", str(path)])
    assert result.exit_code == 2 and "model.pretrained_path" in result.output
    assert " ".join(result.output.split()).count("looks like a Hugging Face Hub name") == 1
    assert server.enqueued == []


@pytest.mark.deployments("embedded")  # the server validates: one code on both
@pytest.mark.parametrize(
    ("text", "problem"),
    [("network: [unclosed", "not valid YAML/JSON"), ("- a list\n", "must be a mapping")],
)
def test_an_unparsable_config_fails_locally_and_sends_nothing(
    server: RecordingDispatcher, tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    result = runner.invoke(remote_app, ["submit", str(path)])
    assert result.exit_code == 2 and "broken.yaml" in result.output and problem in result.output
    listed = runner.invoke(remote_app, ["ls", "--json"])
    assert json.loads(listed.stdout) == []


@pytest.mark.deployments("embedded")  # the server validates: one code on both
def test_submit_rounds_is_checked_by_the_server(server: RecordingDispatcher, tmp_path: Path) -> None:
    result = runner.invoke(remote_app, ["submit", str(_config_file(tmp_path)), "--rounds", "0"])
    assert result.exit_code == 2 and "training.rounds" in result.output
    assert json.loads(runner.invoke(remote_app, ["ls", "--json"]).stdout) == []


@pytest.mark.deployments("embedded")  # the table is the client's
def test_ls_keeps_the_table_whole_when_the_output_is_not_a_terminal(
    server: RecordingDispatcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # CliRunner's output is not a terminal, as a pipe
    name = "a-fairly-long-experiment-name-that-a-script-greps-for"
    submitted = runner.invoke(remote_app, ["submit", str(_config_file(tmp_path, name=name)), "--json"])
    run_id = json.loads(submitted.stdout)["run_id"]
    listed = runner.invoke(remote_app, ["ls"])
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if name in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:6] == [str(run_id), name, "queued", "0/5", "uniform", "analytic"]
    assert len(cells[6]) == len("2025-01-01T00:00:00")  # created: whole


def test_a_bad_token_is_reported(server: RecordingDispatcher, tmp_path: Path) -> None:
    result = runner.invoke(remote_app, ["ls", "--token", "cp_wrong"])
    assert result.exit_code == 2 and "401" in result.output and "unknown or revoked" in result.output


def test_an_unreachable_server_is_reported(tmp_path: Path) -> None:
    result = runner.invoke(remote_app, ["ls", "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "cannot reach" in result.output


def _study_file(tmp_path: Path, policies: list[str]) -> Path:
    (tmp_path / "base.json").write_text(json.dumps(tiny_config(training={"rounds": 3})))
    path = tmp_path / "study.yaml"
    path.write_text(
        "name: cli study\n"
        "bases:\n  - name: tiny\n    config_file: base.json\n"
        f"axes:\n  - field: scheduler.policy\n    values: {json.dumps(policies)}\n"
        "  - field: seed\n    values: [0]\n"
        "concurrency: 2\n"
    )
    return path


def test_study_submit_watch_export(server: RecordingDispatcher, tmp_path: Path) -> None:
    submitted = runner.invoke(
        remote_app, ["study", "submit", str(_study_file(tmp_path, ["uniform", "proportional"])), "--json"]
    )
    assert submitted.exit_code == 0, submitted.output
    created = json.loads(submitted.stdout)
    assert (created["num_cells"], created["num_runs"]) == (2, 2)
    study_id = created["study_id"]

    worker = threading.Timer(0.5, server.release)  # the runs start while watch is following the study
    worker.start()
    watched = runner.invoke(remote_app, ["study", "watch", str(study_id)])
    worker.join()
    assert watched.exit_code == 0, watched.output
    assert f"study {study_id}: succeeded (2/2 runs: 2 succeeded; 6/6 rounds)" in watched.stdout

    out = tmp_path / "table.csv"
    exported = runner.invoke(remote_app, ["study", "export", str(study_id), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [row["scheduler.policy"] for row in rows] == ["uniform", "proportional"]
    parquet = tmp_path / "table.parquet"
    exported = runner.invoke(
        remote_app, ["study", "export", str(study_id), "--format", "parquet", "--out", str(parquet)]
    )
    assert exported.exit_code == 0, exported.output
    assert pq.read_table(parquet).num_rows == 2
    report = tmp_path / "report.html"
    exported = runner.invoke(
        remote_app, ["study", "export", str(study_id), "--format", "html", "--out", str(report)]
    )
    assert exported.exit_code == 0, exported.output
    assert "cli study" in report.read_text()

    # a finished study: watch reports at once
    again = runner.invoke(remote_app, ["study", "watch", str(study_id)])
    assert again.exit_code == 0 and f"study {study_id}: succeeded" in again.stdout


def test_study_watch_json_prints_one_object_per_update_then_the_final_state(
    server: RecordingDispatcher, tmp_path: Path
) -> None:
    submitted = runner.invoke(
        remote_app, ["study", "submit", str(_study_file(tmp_path, ["uniform"])), "--json"]
    )
    study_id = json.loads(submitted.stdout)["study_id"]
    worker = threading.Timer(0.5, server.release)  # the run starts while watch is following the study
    worker.start()
    watched = runner.invoke(remote_app, ["study", "watch", str(study_id), "--json"])
    worker.join()
    assert watched.exit_code == 0, watched.output
    lines = [json.loads(line) for line in watched.stdout.splitlines()]  # nothing but JSON lines
    assert all(line["study_id"] == study_id for line in lines)
    updates = [line["progress"] for line in lines[:-1]]
    assert updates and all(u["runs_total"] == 1 and u["rounds_total"] == 3 for u in updates)
    assert all(a != b for a, b in pairwise(updates))  # one line per change
    done = [u["rounds_done"] for u in updates]
    assert done == sorted(done) and done[-1] == 3
    assert lines[-1]["final"] == {
        "status": "succeeded",
        "runs_total": 1,
        "runs_done": 1,
        "runs_by_status": {"succeeded": 1},
        "rounds_done": 3,
        "rounds_total": 3,
    }


def test_a_study_with_a_bad_cell_is_refused_naming_the_cell(
    server: RecordingDispatcher, tmp_path: Path
) -> None:
    result = runner.invoke(remote_app, ["study", "submit", str(_study_file(tmp_path, ["uniform", "nope"]))])
    assert result.exit_code == 2, result.output
    assert "422" in result.output and "cell 1 (tiny: scheduler.policy='nope')" in result.output
    assert server.enqueued == []


def test_an_unreadable_study_file_is_reported(tmp_path: Path) -> None:
    result = runner.invoke(remote_app, ["study", "submit", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "missing.yaml" in result.output


@pytest.mark.deployments("embedded")
def test_export_model_downloads_the_trained_model_archive(
    server: RecordingDispatcher,
    tmp_path: Path,
    settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    config = _config_file(tmp_path, executor="simulated", training={"rounds": 1, "local_iterations": 1})
    run_id = json.loads(runner.invoke(remote_app, ["submit", str(config), "--json"]).stdout)["run_id"]
    store = RunStore(session_factory)  # executed here: a spawned run process costs seconds
    outcome = execute_run(
        run_id, store, claimant="t", artifact_dir=settings.artifact_dir, workspace=settings.workspace()
    )
    assert outcome == "succeeded"
    out = tmp_path / "model.tar"
    done = runner.invoke(remote_app, ["export", str(run_id), "--model", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert f"wrote {out} ({out.stat().st_size} bytes)" in " ".join(done.stderr.split())  # rich wraps
    with tarfile.open(out) as tar:
        assert f"run-{run_id}-model/model.safetensors" in tar.getnames()
    merged = runner.invoke(remote_app, ["export", str(run_id), "--model", "--merged", "--out", str(out)])
    assert merged.exit_code == 2 and "422" in merged.output and "LoRA adapters" in merged.output
    assert not out.with_name("model.tar.part").exists()
