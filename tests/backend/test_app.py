"""Health, readiness and Prometheus metrics of the app; the error shape for unknown routes."""

from __future__ import annotations

from pathlib import Path

from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api


def test_health_and_readiness(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {
        "status": "ready",
        "checks": {"database": "ok", "executor": "ok"},
    }
    api.dispatcher.ready_problem = "the Redis broker is unreachable"
    response = api.client.get("/readyz")
    assert (
        response.status_code == 503
        and response.json()["checks"]["executor"] == "the Redis broker is unreachable"
    )


def test_prometheus_metrics(api: Api, tmp_path: Path) -> None:
    run = api.client.post("/api/runs", json={"config": tiny_config()}, headers=api.as_("operator")).json()[
        "id"
    ]
    api.client.post("/api/runs", json={"config": tiny_config()}, headers=api.as_("operator"))
    execute_run(
        run,
        RunStore(api.session_factory),
        claimant="t",
        artifact_dir=tmp_path,
        workspace=api.app.state.workspace,
    )
    api.client.get("/api/runs/999", headers=api.as_("viewer"))
    text = api.client.get("/metrics").text
    assert 'collapipe_runs{status="succeeded"} 1.0' in text and 'collapipe_runs{status="queued"} 1.0' in text
    assert 'collapipe_queue_depth{queue="database"} 1.0' in text
    assert "collapipe_rounds_per_second 0.08333" in text  # 5 rounds in the last minute
    assert 'collapipe_http_requests_total{method="GET",route="/api/runs/{run_id}",status="404"} 1.0' in text


def test_unknown_routes_use_the_error_shape(api: Api) -> None:
    response = api.client.get("/api/nope", headers=api.as_("viewer"))
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "http_404", "message": "Not Found", "details": None}}


def test_preflight_models_round_zero_of_the_chosen_policy(api: Api) -> None:
    config = tiny_config()
    body = api.client.post("/api/config/preflight", json=config, headers=api.as_("viewer")).json()
    assert body["round"]["round"] == 0 and body["round"]["latency_s"] > 0
    devices = body["devices"]
    assert devices and all(d["memory_capacity_bytes"] > 0 and d["energy_budget_j"] > 0 for d in devices)
    assert sum(d["num_blocks"] for d in devices if d["cluster"] == 0) == config["model"]["num_blocks"]
    bad = {**config, "channel": {"bandwidth_hz": -1}}
    refused = api.client.post("/api/config/preflight", json=bad, headers=api.as_("viewer"))
    assert refused.status_code == 422
    assert any("bandwidth_hz" in d["field"] for d in refused.json()["error"]["details"])


def test_the_registered_policies_are_listed(api: Api) -> None:
    names = api.client.get("/api/config/policies", headers=api.as_("viewer")).json()
    assert {"dssda", "uniform", "slow-uniform", "paced-uniform"} <= set(names) and names == sorted(names)
