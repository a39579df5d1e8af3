"""/api/config: the experiment config's JSON Schema (drives the browser form), a dry-run check, and
the metric catalogue (names, units, whether modeled) shared by the API and the dashboard."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from backend.deps import PreflightDep, ViewerUser, WorkspaceDep
from backend.errors import ERROR_RESPONSES
from collapipe_core.config import config_json_schema
from collapipe_core.metrics import METRICS

router = APIRouter(prefix="/api/config", tags=["config"], responses=ERROR_RESPONSES)


class MetricOut(BaseModel):
    name: str
    unit: str
    scope: str
    modeled: bool
    description: str


@router.get("/schema")
def schema(_user: ViewerUser) -> dict[str, Any]:
    """JSON Schema of experiment configs (every field's description, default and bounds)."""
    return config_json_schema()


@router.post("/validate")
async def validate(
    config: dict[str, Any], _user: ViewerUser, workspace: WorkspaceDep, process: PreflightDep
) -> dict[str, Any]:
    """Check a config without storing it; 422 names every problem. Returns the config with defaults.

    The check reads the files the config names, so it runs in a child process of the API with a
    deadline (COLLAPIPE_VALIDATE_TIMEOUT_S) and a memory limit (COLLAPIPE_CHECK_MEMORY_BYTES): 422
    when it needs more."""
    return await process.validate(config, workspace)


@router.post("/preflight")
async def preflight(
    config: dict[str, Any], _user: ViewerUser, workspace: WorkspaceDep, process: PreflightDep
) -> dict[str, Any]:
    """Round 0 of the config's policy on the cost model, before launching: {"round": ..., "devices": [...],
    "model": {params, trainable_params, frozen_params, precision, recomputing_devices}, "memory_parts":
    {device id: {weights, gradients, optimizer_state, activations, runtime}}}
    with modeled latency, energy and memory per device (against capacity and budget). 422 as /validate,
    and when the estimate takes longer than the server allows (COLLAPIPE_PREFLIGHT_TIMEOUT_S)."""
    return await process.run(config, workspace)


@router.get("/policies")
def policies(_user: ViewerUser, workspace: WorkspaceDep) -> list[str]:
    """The policies a config may name on this server: built-ins, installed packages' entry points and
    the operator's allow-list (COLLAPIPE_POLICIES)."""
    return workspace.policies.names()


@router.get("/metrics")
def metrics(_user: ViewerUser) -> list[MetricOut]:
    return [MetricOut(**vars(m)) for m in METRICS]
