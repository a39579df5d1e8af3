"""Request and response bodies of runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.params import MAX_ID
from backend.request_body import Integral, StrictBody
from backend.text_input import StoredStr

RunStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class RunCreate(StrictBody):
    experiment_id: Integral | None = Field(
        default=None, ge=1, le=MAX_ID, description="launch a saved experiment"
    )
    config: dict[str, Any] | None = Field(
        default=None, description="or an inline experiment config; schema at GET /api/config/schema"
    )
    name: StoredStr | None = Field(
        default=None, min_length=1, max_length=200, description="default: config.name"
    )

    @model_validator(mode="after")
    def _one_source(self) -> RunCreate:
        if (self.experiment_id is None) == (self.config is None):
            raise ValueError("give exactly one of experiment_id and config")
        return self


class RunFork(StrictBody):
    round: Integral = Field(
        ge=0, le=MAX_ID, description="k: the fork starts from the parent's state at round k"
    )
    policy: StoredStr | None = Field(
        default=None, min_length=1, max_length=200, description="policy from round k"
    )
    V: float | None = Field(default=None, ge=0, le=1e12, description="Lyapunov V from round k")
    segments: list[Integral] | None = Field(
        default=None, max_length=1000, description="TEBs per device (policy 'fixed') from round k"
    )
    rounds: Integral | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="the fork's total rounds (training.rounds, the k replayed ones included), more than k; "
        "default the parent's. A finished run continues with round = its rounds done and more rounds",
    )


class RunOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    experiment_id: int | None
    status: RunStatus
    owner_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    rounds_done: int
    total_rounds: int
    error: str | None
    cancel_requested: bool
    attempt: int
    parent_run_id: int | None
    fork_round: int | None
    policy: str
    executor: str
    V: float = Field(description="scheduler.V: Lyapunov weight of latency against the energy queues")
    num_clusters: int = Field(description="network.num_clusters")
    devices_per_cluster: int = Field(description="network.devices_per_cluster")


class RunListItem(RunOut):
    """A run as the runs list shows it: its row, its owner's name and its latest figures."""

    owner_name: str | None = Field(description="the owner's username; null once the owner is deleted")
    latest_round: int | None = Field(description="index of the latest stored round; null before the first")
    latest_latency_s: float | None = Field(description="latency_s of the latest stored round")
    latest_eval_round: int | None = Field(description="the latest round with an eval_loss")
    latest_eval_loss: float | None = Field(description="eval_loss of latest_eval_round")
    latest_eval_perplexity: float | None = Field(
        description="eval_perplexity of latest_eval_round (causal LM runs)"
    )
    latest_eval_accuracy: float | None = Field(description="eval_accuracy of latest_eval_round")


class RunDetail(RunOut):
    config: dict[str, Any]
    replay_configs: list[dict[str, Any]] | None = Field(
        description="forks: configs that produced the rounds before each switch"
    )


class RunView(RunDetail):
    """A run as its page opens it: the detail, the owner's name and the head of its live stream."""

    owner_name: str | None = Field(description="the owner's username; null once the owner is deleted")
    last_event_id: str = Field(
        description="id of the run's latest live event when rounds_done was read ('0': none yet): "
        "GET /api/runs/{id}/events?after=<last_event_id> sends what came after (rounds > rounds_done - 1)"
    )


class RunPage(BaseModel):
    items: list[RunListItem]
    total: int
    limit: int
    offset: int
