"""Every endpoint × anonymous, viewer, operator, admin: who gets in (table-driven).

Anonymous gets 401 everywhere except login and the ops probes; a role below the endpoint's needs
403; a role at or above it anything but 401/403 (and never a 5xx). The table must list every route
the app serves, so a new endpoint cannot be added without deciding its role here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.builders import tiny_config
from tests.backend.conftest import PASSWORD, Api

RANK = {"anonymous": 0, "viewer": 1, "operator": 2, "admin": 3}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # with {experiment}, {run}, {round}, {user}, {token}, {study}, {name} placeholders
    role: str  # the least role allowed ("anonymous": public)
    body: Any = None
    streams: bool = False  # an endpoint that streams forever when allowed: only denials are checked here


MATRIX = [
    Endpoint("GET", "/healthz", "anonymous"),
    Endpoint("GET", "/readyz", "anonymous"),
    Endpoint("GET", "/metrics", "anonymous"),
    Endpoint("POST", "/api/auth/login", "anonymous", {"username": "viewer", "password": PASSWORD}),
    Endpoint("GET", "/api/auth/me", "viewer"),
    Endpoint(
        "POST", "/api/auth/password", "viewer", {"current_password": "wrong", "new_password": "whatever1"}
    ),
    Endpoint("POST", "/api/auth/logout", "viewer"),
    Endpoint("GET", "/api/config/schema", "viewer"),
    Endpoint("POST", "/api/config/validate", "viewer", tiny_config()),
    Endpoint("POST", "/api/config/preflight", "viewer", tiny_config()),
    Endpoint("POST", "/api/config/dataset", "viewer", tiny_config()),
    Endpoint("GET", "/api/config/checkpoint?path=checkpoints/none", "viewer"),
    Endpoint("GET", "/api/config/architectures", "viewer"),
    Endpoint("GET", "/api/config/metrics", "viewer"),
    Endpoint("GET", "/api/config/policies", "viewer"),
    Endpoint("GET", "/api/files", "viewer"),
    Endpoint("GET", "/api/experiments", "viewer"),
    Endpoint("GET", "/api/experiments/{experiment}", "viewer"),
    Endpoint("GET", "/api/runs", "viewer"),
    Endpoint("GET", "/api/runs/{run}", "viewer"),
    Endpoint("GET", "/api/runs/{run}/events", "viewer"),
    Endpoint("GET", "/api/runs/events", "viewer", streams=True),
    Endpoint("GET", "/api/runs/{run}/rounds", "viewer"),
    Endpoint("GET", "/api/runs/{run}/devices", "viewer"),
    Endpoint("GET", "/api/runs/{run}/rounds/{round}/devices", "viewer"),
    Endpoint("GET", "/api/runs/{run}/decisions", "viewer"),
    Endpoint("GET", "/api/runs/{run}/timeline?round=1", "viewer"),
    Endpoint("GET", "/api/runs/{run}/export", "viewer"),
    Endpoint("GET", "/api/runs/{run}/model", "viewer"),
    Endpoint("GET", "/api/compare?run_ids={run}", "viewer"),
    Endpoint("GET", "/api/studies", "viewer"),
    Endpoint("GET", "/api/studies/presets", "viewer"),
    Endpoint("GET", "/api/studies/{study}", "viewer"),
    Endpoint("GET", "/api/studies/{study}/export", "viewer"),
    Endpoint("GET", "/api/studies/{study}/series", "viewer"),
    Endpoint("GET", "/api/studies/{study}/events", "viewer", streams=True),
    Endpoint("POST", "/api/experiments", "operator", {"config": tiny_config()}),
    Endpoint("PATCH", "/api/experiments/{experiment}", "operator", {"name": "renamed"}),
    Endpoint("POST", "/api/experiments/{experiment}/clone", "operator"),
    Endpoint("POST", "/api/runs", "operator", {"config": tiny_config()}),
    Endpoint("POST", "/api/runs/{run}/cancel", "operator"),
    Endpoint("POST", "/api/runs/{run}/resume", "operator"),
    Endpoint("POST", "/api/runs/{run}/fork", "operator", {"round": 1, "V": 2.0}),
    Endpoint("POST", "/api/studies", "operator", {"name": "matrix", "bases": [{"config": tiny_config()}]}),
    Endpoint("POST", "/api/studies/{study}/cancel", "operator"),
    Endpoint("POST", "/api/studies/{study}/resume", "operator"),
    Endpoint("PUT", "/api/files/{name}", "operator", {"text": "a", "label": "b"}),  # the body is the file
    Endpoint("GET", "/api/users", "admin"),
    Endpoint("POST", "/api/users", "admin", {"username": "new-user", "password": "long enough"}),
    Endpoint("GET", "/api/users/{user}", "admin"),
    Endpoint("PATCH", "/api/users/{user}", "admin", {"role": "operator"}),
    Endpoint("GET", "/api/tokens", "admin"),
    Endpoint("POST", "/api/tokens", "admin", {"name": "matrix"}),
    Endpoint("DELETE", "/api/tokens/{token}", "admin"),
    Endpoint("POST", "/api/users/{user}/deactivate", "admin"),
    Endpoint("DELETE", "/api/users/{user}", "admin"),
    Endpoint("DELETE", "/api/runs/{run}", "admin"),
    Endpoint("DELETE", "/api/experiments/{experiment}", "admin"),
    Endpoint("DELETE", "/api/files/{name}", "admin"),
]


@pytest.fixture
def ids(api: Api, tmp_path: Path) -> dict[str, Any]:
    admin, operator = api.as_("admin"), api.as_("operator")
    experiment = api.client.post("/api/experiments", json={"config": tiny_config()}, headers=operator).json()[
        "id"
    ]
    run = api.client.post("/api/runs", json={"config": tiny_config()}, headers=operator).json()["id"]
    outcome = execute_run(
        run,
        RunStore(api.session_factory),
        claimant="t",
        artifact_dir=tmp_path,
        workspace=api.app.state.workspace,
    )
    assert outcome == "succeeded"
    user = api.client.post(
        "/api/users", json={"username": "victim", "password": "long enough"}, headers=admin
    ).json()["id"]
    token = api.client.post("/api/tokens", json={"name": "victim"}, headers=admin).json()["id"]
    study = api.client.post(
        "/api/studies", json={"name": "s", "bases": [{"config": tiny_config()}]}, headers=operator
    ).json()["id"]
    return {
        "experiment": experiment,
        "run": run,
        "user": user,
        "token": token,
        "study": study,
        "name": "datasets/m.jsonl",
        "round": 1,
    }


def test_the_matrix_lists_every_route(api: Api) -> None:
    served = {
        (method, path)
        for path, item in api.app.openapi()["paths"].items()
        for method in item
        if method in ("get", "post", "patch", "delete", "put")
    }
    listed = set()
    for e in MATRIX:
        path = e.path.split("?")[0]
        for name, param in (
            ("experiment", "experiment_id"),
            ("run", "run_id"),
            ("user", "user_id"),
            ("token", "token_id"),
            ("study", "study_id"),
        ):
            path = path.replace("{" + name + "}", "{" + param + "}")
        listed.add((e.method.lower(), path))
    assert listed == served


def test_access_matrix(api: Api, ids: dict[str, Any]) -> None:
    problems = []
    for endpoint in MATRIX:
        url = endpoint.path.format(**ids)
        for role in ("anonymous", "viewer", "operator", "admin"):
            allowed = RANK[role] >= RANK[endpoint.role]
            if allowed and endpoint.streams:
                continue
            kwargs: dict[str, Any] = {"headers": api.as_(role)}
            if endpoint.body is not None:
                kwargs["json"] = endpoint.body
            api.client.cookies.clear()  # a login above must not authenticate "anonymous" here
            status = api.client.request(endpoint.method, url, **kwargs).status_code
            expected = "not 401/403" if allowed else ("401" if role == "anonymous" else "403")
            ok = (status not in (401, 403) and status < 500) if allowed else status == int(expected)
            if not ok:
                problems.append(f"{endpoint.method} {url} as {role}: {status}, expected {expected}")
    assert problems == []
