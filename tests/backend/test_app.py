"""Health, readiness and Prometheus metrics of the app; the error shape for unknown routes."""

from __future__ import annotations

from pathlib import Path

from backend.live.channel import MemoryChannel
from backend.runs.execution import execute_run
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
    execute_run(run, api.session_factory, MemoryChannel(), claimant="t", artifact_dir=tmp_path)
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
