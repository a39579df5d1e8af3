"""GET /api/runs/{id}/model: a finished run's trained model as a tar archive, streamed with its size,
built once per checkpoint, for anyone who may read the run; refused with a clear 4xx otherwise."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from backend.db.models import Run
from backend.runs import model_archive
from backend.runtime.execution import checkpoint_dir_for, execute_run
from backend.runtime.lifecycle import RunStore
from collapipe_core.config import ExperimentConfig
from collapipe_core.data import load_dataset
from collapipe_core.export import load_model, weight_bytes
from collapipe_core.pipeline.quality import evaluate_model
from tests.backend.builders import stored_records, tiny_config
from tests.backend.conftest import Api

SIMULATED = {"executor": "simulated", "training": {"rounds": 2, "local_iterations": 1}}


def _finished(api: Api, config: dict[str, Any]) -> int:
    """A run of ``config`` executed to its end in the test process (a spawned run process costs seconds)."""
    created = api.client.post("/api/runs", json={"config": config}, headers=api.as_("operator"))
    assert created.status_code == 201, created.text
    run_id: int = created.json()["id"]
    settings = api.app.state.settings
    store = RunStore(api.session_factory)
    outcome = execute_run(
        run_id, store, claimant="t", artifact_dir=settings.artifact_dir, workspace=api.app.state.workspace
    )
    assert outcome == "succeeded"
    return run_id


def _download(api: Api, run_id: int, role: str = "viewer", **params: Any) -> Any:
    return api.client.get(f"/api/runs/{run_id}/model", params=params, headers=api.as_(role))


def _extracted(body: bytes, into: Path) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = tar.getnames()
        tar.extractall(into, filter="data")
    return names


def _eval_loss(api: Api, config: dict[str, Any], directory: Path) -> float:
    typed = ExperimentConfig.model_validate(config)
    bundle = load_dataset(typed)
    ids = {"pad_id": bundle.pad_id, "bos_id": bundle.bos_id, "eos_id": bundle.eos_id}
    loss, _ = evaluate_model(load_model(directory), bundle.eval, **ids)
    return loss


def test_a_viewer_downloads_a_finished_runs_model_as_a_streamed_tar(api: Api, tmp_path: Path) -> None:
    config = tiny_config(**SIMULATED)
    run_id = _finished(api, config)
    assert _download(api, run_id, "anonymous").status_code == 401
    response = _download(api, run_id)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-tar"
    assert int(response.headers["content-length"]) == len(response.content)
    assert f'filename="run-{run_id}-model.tar"' in response.headers["content-disposition"]
    names = _extracted(response.content, tmp_path)
    root = f"run-{run_id}-model"
    assert sorted(names) == [root, f"{root}/collapipe.json", f"{root}/model.safetensors"]
    last = stored_records(api.session_factory, run_id)[-1]
    assert abs(_eval_loss(api, config, tmp_path / root) - last["eval_loss"]) <= 1e-5
    # served again from the file built once for this checkpoint: the same bytes
    run_dir = checkpoint_dir_for(api.app.state.settings.artifact_dir, run_id)
    assert [p.name for p in run_dir.glob("model-*.tar")] == ["model-checkpoint-a1-r2.tar"]
    assert _download(api, run_id, "operator").content == response.content


@pytest.mark.deployments("embedded")
def test_a_lora_runs_model_is_its_adapter_or_merged_into_its_base(api: Api, tmp_path: Path) -> None:
    config = tiny_config(
        executor="simulated", training={"rounds": 1, "local_iterations": 1, "peft": {"r": 2}}
    )
    run_id = _finished(api, config)
    adapter = _download(api, run_id)
    assert adapter.status_code == 200, adapter.text
    names = _extracted(adapter.content, tmp_path)
    assert f"run-{run_id}-model/adapter_config.json" in names
    assert f"run-{run_id}-model/adapter_model.safetensors" in names
    merged = _download(api, run_id, merged="true")
    assert merged.status_code == 200, merged.text
    assert f'filename="run-{run_id}-model-merged.tar"' in merged.headers["content-disposition"]
    _extracted(merged.content, tmp_path)
    assert (tmp_path / f"run-{run_id}-model-merged" / "model.safetensors").is_file()
    last = stored_records(api.session_factory, run_id)[-1]["eval_loss"]
    for folder in (f"run-{run_id}-model", f"run-{run_id}-model-merged"):
        assert abs(_eval_loss(api, config, tmp_path / folder) - last) <= 1e-5


def _set(api: Api, run_id: int, **values: Any) -> None:
    with api.session_factory() as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))
        session.commit()


@pytest.mark.deployments("embedded")
def test_runs_without_a_model_to_serve_are_refused_clearly_and_nothing_is_written(api: Api) -> None:
    artifacts = api.app.state.settings.artifact_dir
    analytic = _finished(api, tiny_config(training={"rounds": 1}))
    refused = _download(api, analytic)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert "analytic executor trains no weights" in error["message"]
    assert error["details"][0]["field"] == "executor"

    run_id = _finished(api, tiny_config(**SIMULATED))
    merged = _download(api, run_id, merged="true")
    assert merged.status_code == 422 and merged.json()["error"]["details"][0]["field"] == "merged"
    _set(api, run_id, status="running")
    running = _download(api, run_id)
    assert running.status_code == 409 and "is running" in running.json()["error"]["message"]
    _set(api, run_id, status="cancelled", checkpoint=None)
    unchecked = _download(api, run_id)
    assert unchecked.status_code == 409 and "no trained weights" in unchecked.json()["error"]["message"]
    assert _download(api, 10_000).status_code == 404
    assert list(artifacts.glob("run-*/model-*")) == []


@pytest.mark.deployments("embedded")
def test_a_model_past_the_export_limit_is_refused_before_or_after_it_is_built(
    api: Api, app_factory: Any, tmp_path: Path
) -> None:
    config = tiny_config(**SIMULATED)
    run_id = _finished(api, config)
    typed = ExperimentConfig.model_validate(config)
    weights = weight_bytes(typed, load_dataset(typed), None)
    run_dir = checkpoint_dir_for(api.app.state.settings.artifact_dir, run_id)
    for limit, what in ((weights - 1, "its weights alone are"), (weights, "its archive is")):
        api.app.state.settings = api.app.state.settings.model_copy(update={"max_export_bytes": limit})
        refused = _download(api, run_id)
        assert refused.status_code == 413, refused.text
        message = refused.json()["error"]["message"]
        assert f"{what} " in message and "COLLAPIPE_MAX_EXPORT_BYTES" in message
        assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint-a1-r2.pt"]  # nothing left behind


@pytest.mark.deployments("embedded")
def test_one_model_is_built_at_a_time_and_a_cached_one_is_served_meanwhile(api: Api) -> None:
    run_id = _finished(api, tiny_config(**SIMULATED))
    other = _finished(api, tiny_config(**SIMULATED))
    assert _download(api, other).status_code == 200  # built and cached
    held = model_archive._building.acquire(blocking=False)  # as if another export were being built
    assert held
    try:
        busy = _download(api, run_id)
        assert busy.status_code == 429 and int(busy.headers["retry-after"]) >= 1
        assert "exporting another model" in busy.json()["error"]["message"]
        assert _download(api, other).status_code == 200  # from its file, no build
    finally:
        model_archive._building.release()
    assert _download(api, run_id).status_code == 200
