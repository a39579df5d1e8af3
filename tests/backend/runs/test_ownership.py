"""Who may act on a run or a study, and how much one user may have queued: only the owner or an
admin cancels, resumes or forks a run and cancels or resumes a study (403 otherwise, nothing
changes); one user may have at most COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER queued or running runs and
COLLAPIPE_MAX_ACTIVE_STUDIES_PER_USER unfinished studies (409 beyond, nothing created)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.db.models import Run, Study
from tests.backend.builders import insert_run, tiny_config
from tests.backend.client import SyncClient
from tests.backend.conftest import Api, RecordingDispatcher, add_user


def _status(api: Api, run_id: int) -> str:
    with api.session_factory() as session:
        return session.get_one(Run, run_id).status


def test_only_the_owner_or_an_admin_acts_on_a_run(api: Api, session_factory: sessionmaker[Session]) -> None:
    _, other_token = add_user(session_factory, "op2", "operator")
    other = {"Authorization": f"Bearer {other_token}"}
    run_id = insert_run(session_factory, owner_id=api.user_ids["operator"], status="failed", rounds_done=1)
    for action, body in (("resume", None), ("fork", {"round": 0, "policy": "uniform"})):
        refused = api.client.post(f"/api/runs/{run_id}/{action}", json=body, headers=other)
        assert refused.status_code == 403, refused.text
        assert "owner" in refused.json()["error"]["message"]
    assert _status(api, run_id) == "failed"
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 1  # no fork was made
    assert api.client.post(f"/api/runs/{run_id}/resume", headers=api.as_("operator")).status_code == 200
    assert api.client.post(f"/api/runs/{run_id}/cancel", headers=other).status_code == 403
    assert _status(api, run_id) == "queued"
    assert api.client.post(f"/api/runs/{run_id}/cancel", headers=api.as_("admin")).status_code == 200
    assert _status(api, run_id) == "cancelled"
    forked = api.client.post(f"/api/runs/{run_id}/fork", json={"round": 0}, headers=api.as_("admin"))
    assert forked.status_code == 201 and forked.json()["owner_id"] == api.user_ids["admin"]


def test_only_the_owner_or_an_admin_cancels_or_resumes_a_study(
    api: Api, session_factory: sessionmaker[Session]
) -> None:
    _, other_token = add_user(session_factory, "op2", "operator")
    other = {"Authorization": f"Bearer {other_token}"}
    body = {
        "name": "mine",
        "bases": [{"config": tiny_config()}],
        "axes": [{"field": "seed", "values": [1, 2]}],
    }
    study = api.client.post("/api/studies", json=body, headers=api.as_("operator")).json()
    refused = api.client.post(f"/api/studies/{study['id']}/cancel", headers=other)
    assert refused.status_code == 403 and "owner" in refused.json()["error"]["message"]
    assert (
        api.client.get(f"/api/studies/{study['id']}", headers=other).json()["progress"]["status"] == "queued"
    )
    assert (
        api.client.post(f"/api/studies/{study['id']}/cancel", headers=api.as_("operator")).status_code == 200
    )
    assert api.client.post(f"/api/studies/{study['id']}/resume", headers=other).status_code == 403
    assert api.client.post(f"/api/studies/{study['id']}/resume", headers=api.as_("admin")).status_code == 200


@pytest.fixture
def capped(
    app_factory: Callable[..., FastAPI], session_factory: sessionmaker[Session]
) -> Iterator[tuple[SyncClient, dict[str, dict[str, str]]]]:
    headers = {}
    for username in ("op1", "op2"):
        _, token = add_user(session_factory, username, "operator")
        headers[username] = {"Authorization": f"Bearer {token}"}
    app = app_factory(RecordingDispatcher(), max_active_runs_per_user=3, max_active_studies_per_user=1)
    with SyncClient(app) as client:
        yield client, headers


def _launch(client: SyncClient, headers: dict[str, str]) -> Any:
    return client.post("/api/runs", json={"config": tiny_config()}, headers=headers)


def test_one_user_may_have_only_so_many_runs_queued_or_running(
    capped: tuple[SyncClient, dict[str, dict[str, str]]], session_factory: sessionmaker[Session]
) -> None:
    client, users = capped
    op1, op2 = users["op1"], users["op2"]
    ids = [_launch(client, op1).json()["id"] for _ in range(3)]
    refused = _launch(client, op1)
    assert (
        refused.status_code == 409
        and "COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER" in refused.json()["error"]["message"]
    )
    fork = client.post(f"/api/runs/{ids[0]}/fork", json={"round": 0}, headers=op1)
    assert fork.status_code == 409  # nothing created
    study = {"name": "s", "bases": [{"config": tiny_config()}], "axes": [{"field": "seed", "values": [1]}]}
    assert client.post("/api/studies", json=study, headers=op1).status_code == 409
    assert _launch(client, op2).status_code == 201  # another user's own allowance
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 4
        assert session.scalar(select(func.count()).select_from(Study)) == 0
    assert client.post(f"/api/runs/{ids[0]}/cancel", headers=op1).status_code == 200
    assert _launch(client, op1).status_code == 201  # a cancelled run frees its place
    assert client.post(f"/api/runs/{ids[0]}/resume", headers=op1).status_code == 409  # back at the cap


def test_one_user_may_have_only_so_many_studies_unfinished(
    capped: tuple[SyncClient, dict[str, dict[str, str]]],
) -> None:
    client, users = capped
    study = {"name": "s", "bases": [{"config": tiny_config()}], "axes": [{"field": "seed", "values": [1, 2]}]}
    first = client.post("/api/studies", json=study, headers=users["op1"])
    assert first.status_code == 201, first.text
    second = client.post("/api/studies", json=study, headers=users["op1"])
    assert (
        second.status_code == 409
        and "COLLAPIPE_MAX_ACTIVE_STUDIES_PER_USER" in second.json()["error"]["message"]
    )
    too_many = {**study, "axes": [{"field": "seed", "values": [1, 2, 3, 4]}]}
    runs = client.post("/api/studies", json=too_many, headers=users["op2"])
    assert runs.status_code == 409 and "COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER" in runs.json()["error"]["message"]
    assert client.post(f"/api/studies/{first.json()['id']}/cancel", headers=users["op1"]).status_code == 200
    assert client.post("/api/studies", json=study, headers=users["op1"]).status_code == 201
