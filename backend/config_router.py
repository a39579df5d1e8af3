"""/api/config: the experiment config's JSON Schema (drives the browser form), a dry-run check, what
the form shows beside it (the data's size, a checkpoint's sizes, the Hugging Face families' config
fields), and the metric catalogue (names, units, whether modeled) shared by the API and the dashboard."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from backend.config_input import checkpoint as checkpoint_sizes
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


class DatasetOut(BaseModel):
    source: str
    unit: str
    train: int
    held_out: int | None
    max_samples_per_cluster: int
    max_eval_samples: int


@router.post("/dataset")
async def dataset(
    config: dict[str, Any], _user: ViewerUser, workspace: WorkspaceDep, process: PreflightDep
) -> DatasetOut:
    """How many samples the config's data hold — ``train`` (the clusters' shards, and the held-out set
    when there is no eval file) and ``held_out`` (the eval file's, or null), counted in ``unit`` (rows,
    samples after filtering, or windows of seq_len + 1 tokens) — and the largest
    ``data.samples_per_cluster`` and ``data.eval_samples`` they allow, each with the other as the
    config sets it (0: none fits). Read as /validate reads the data (in its child process, with its
    deadline); the config's other problems do not stop it: 422 only when the data cannot be read."""
    return DatasetOut(**await process.dataset(config, workspace))


class CheckpointOut(BaseModel):
    architecture: str
    d_model: int
    num_heads: int
    num_kv_heads: int | None
    ffn_dim: int
    num_blocks: int
    num_decoder_layers: int | None
    vocab_size: int
    max_positions: int


@router.get("/checkpoint")
def checkpoint(
    path: Annotated[str, Query(min_length=1, max_length=255, description="a model.pretrained_path")],
    _user: ViewerUser,
    workspace: WorkspaceDep,
) -> CheckpointOut:
    """The architecture and model sizes the config.json of checkpoint ``path`` gives (what a config that
    names it as ``model.pretrained_path`` takes): read as JSON only, a regular file of at most 1 MiB
    inside the data directory; 422 naming ``query.path`` otherwise."""
    return CheckpointOut(**checkpoint_sizes(path, workspace))


class ArchitectureOut(BaseModel):
    kind: str
    config_fields: list[str]


@router.get("/architectures")
async def architectures(
    _user: ViewerUser, workspace: WorkspaceDep, process: PreflightDep
) -> dict[str, ArchitectureOut]:
    """Per Hugging Face architecture: the model kind it trains and the fields of its config class (the
    keys ``model.hf_config`` may name, besides those CollaPipe sets itself)."""
    families = await process.architectures(workspace)
    return {name: ArchitectureOut(**fields) for name, fields in families.items()}


@router.get("/policies")
def policies(_user: ViewerUser, workspace: WorkspaceDep) -> list[str]:
    """The policies a config may name on this server: built-ins, installed packages' entry points and
    the operator's allow-list (COLLAPIPE_POLICIES)."""
    return workspace.policies.names()


@router.get("/metrics")
def metrics(_user: ViewerUser) -> list[MetricOut]:
    return [MetricOut(**vars(m)) for m in METRICS]
