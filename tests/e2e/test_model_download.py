"""After a run, "Download model" on its page gives an archive that loads into the trained model, for a
viewer too; and the run continues as a fork at its last round with more rounds."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import load_dataset
from collapipe_core.export import load_model
from collapipe_core.pipeline.quality import evaluate_model
from tests.e2e.configs import tiny
from tests.e2e.conftest import Login
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e


@pytest.mark.deployments("production")  # the API serves what a Celery worker trained
def test_download_model_gives_an_archive_of_the_trained_model(
    login: Login, server: Server, tmp_path: Path
) -> None:
    config = tiny(rounds=2)  # the quickstart's builtin seq2seq model, trained (simulated)
    run_id = server.launch(config, name="model to download")
    server.wait_for_run(run_id, ("succeeded",))
    with server.client() as client:
        rounds = client.get(f"/api/runs/{run_id}/rounds", params={"fields": "eval_loss"}).json()
    last_eval_loss = rounds["series"]["eval_loss"]["value"][-1]

    page = login("viewer")  # a viewer acts on no run, and may download what it reads
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached()
    expect(page.get_by_role("button", name=f"Fork run {run_id}")).to_have_count(0)
    with page.expect_download() as started:
        page.get_by_role("button", name=f"Download model of run {run_id}").click()
    download = started.value
    assert download.suggested_filename == f"run-{run_id}-model.tar"
    with tarfile.open(download.path()) as tar:
        tar.extractall(tmp_path, filter="data")
    model = load_model(tmp_path / f"run-{run_id}-model")
    bundle = load_dataset(ExperimentConfig.model_validate(config))
    ids = {"pad_id": bundle.pad_id, "bos_id": bundle.bos_id, "eos_id": bundle.eos_id}
    loss, _ = evaluate_model(model, bundle.eval, **ids)
    assert abs(loss - last_eval_loss) <= 1e-5

    page = login("admin")  # the run's owner: it continues the finished run with more rounds
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached()
    page.get_by_role("button", name=f"Fork run {run_id}").first.click()
    dialog = page.get_by_role("dialog", name=f"Fork run {run_id}")
    dialog.get_by_label("Start at round k").fill("2")
    dialog.get_by_label("Rounds in all").fill("3")
    dialog.get_by_role("button", name="Fork").click()
    expect(page).not_to_have_url(re.compile(rf"#/runs/{run_id}$"))
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"))
    fork_id = int(page.url.rsplit("/", 1)[1])
    with server.client() as client:
        fork = client.get(f"/api/runs/{fork_id}").json()
        client.post(f"/api/runs/{fork_id}/cancel")  # the fork's rounds are not this test's
    assert (fork["fork_round"], fork["total_rounds"], fork["parent_run_id"]) == (2, 3, run_id)
