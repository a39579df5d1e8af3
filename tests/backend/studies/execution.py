"""Executing a study's runs inside the test process, as an executor does: for tests about what a
study's stored runs give (each spawned process of the embedded executor costs seconds of start-up;
tests/backend/studies/test_router.py runs studies through both deployments' own executors)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from backend.db.models import Run
from backend.runtime import lifecycle
from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.conftest import Api


def run_here(api: Api, study_id: int, artifact_dir: Path) -> list[str]:
    """Run the study's queued runs that may start until none is left; every run's final status."""
    store = RunStore(api.session_factory)
    workspace = api.app.state.workspace
    while started := lifecycle.startable_run_ids(store, 100, study_id=study_id):
        for run_id in started:
            execute_run(
                run_id, store, claimant=f"test-{run_id}", artifact_dir=artifact_dir, workspace=workspace
            )
    with api.session_factory() as session:
        return list(session.scalars(select(Run.status).where(Run.study_id == study_id).order_by(Run.id)))
