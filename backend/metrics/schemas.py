"""Response bodies of the metrics domain. Series are columnar: ``round`` and ``value`` lists."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from backend.metrics.downsample import Method


class Series(BaseModel):
    round: list[float] = Field(description="round index (a bucket's mean round with method=mean)")
    value: list[float]
    elapsed_s: list[float] = Field(
        description="modeled elapsed time at the end of each point's round: Σ latency_s of the run's "
        "rounds up to it (a bucket's mean with method=mean)"
    )


class RoundSeries(BaseModel):
    run_id: int
    points_stored: int = Field(description="rounds stored in the requested range")
    method: Method
    max_points: int
    series: dict[str, Series]
    units: dict[str, str]
    last_round: int | None = Field(description="the last stored round in range; none if none is")
    elapsed_s: float = Field(
        description="modeled elapsed time at the end of last_round (Σ latency_s from the first round); "
        "a live round r adds its latency_s"
    )


class DeviceMetricSeries(BaseModel):
    unit: str
    method: Method
    max_points: int
    series: dict[str, Series] = Field(description="per device id")


class DeviceSeries(BaseModel):
    run_id: int
    metrics: dict[str, DeviceMetricSeries] = Field(description="per metric, in the order asked")
    devices_total: int = Field(description="devices the run has (page through them: offset, limit)")


class DecisionItem(BaseModel):
    round: int
    policy: str
    objective: float | None
    objective_latency: float | None = Field(description="V·T")
    objective_convergence: float | None = Field(description="V·λ·G(M)")
    objective_energy: float | None = Field(description="Σ_k Q_k·E_k")
    feasible: bool
    violations: list[str]
    solver_iterations: int
    solve_time_s: float | None
    num_microbatches: list[int]
    blocks_moved: int | None = Field(
        description="TEBs whose optimizer state changed device since the previous round (all clusters); "
        "none for rounds recorded before block moves were modeled"
    )
    redistribution_s: list[float | None] = Field(
        description="per cluster: R_n, the redistribution before the first iteration (s); null if not finite"
    )
    moves_latency_share: float | None = Field(description="share of the round latency the block moves cost")
    decision: dict[str, Any]
    measured: dict[str, dict[str, float | None]] = Field(
        default_factory=dict,
        description="what the distributed executor measured, per participant (c0-cu, c0-d1, c0-edge); "
        "empty for executors that measure nothing",
    )
    explanation: dict[str, Any] = Field(
        default_factory=dict,
        description="why the decision is what it is: 'sentence', and 'counterfactuals' (spread over two "
        "devices or more, the next smaller and larger M, the uniform split), each with its decision, its "
        "objective and the difference by term (compute, links, energy, convergence) against the chosen one; "
        "empty for rounds recorded before decisions were explained",
    )


class DecisionPage(BaseModel):
    run_id: int
    items: list[DecisionItem]
    total: int
    limit: int
    offset: int


class RoundDevicesPage(BaseModel):
    """A page of one stored round's device records (``DeviceRecord`` fields, with what the distributed
    executor measured on the device), in cluster then device order."""

    run_id: int
    round: int
    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int


class TimelineEventOut(BaseModel):
    participant: str
    kind: Literal["forward", "backward", "send", "receive"]
    microbatch: int = Field(description="-1 for a transfer of the redistribution phase")
    start_s: float
    end_s: float
    peer: str
    phase: Literal["pipeline", "redistribution"] = Field(
        description="redistribution: a transfer before the first iteration (the averaged model to the CU, "
        "moved optimizer state to the CU, each device's segment from the CU); pipeline: the first iteration"
    )
    label: str = Field(description="what a redistribution transfer carries; empty for the pipeline")


class TimelineOut(BaseModel):
    run_id: int
    round: int
    cluster: int
    schedule: str
    num_microbatches: int
    makespan_s: float = Field(description="the first iteration's length (it starts at redistribution_s)")
    redistribution_s: float = Field(description="R_n: the redistribution phase before the first iteration")
    peak_in_flight: dict[str, int]
    busy_s: dict[str, float]
    events: list[TimelineEventOut]


class CompareRow(BaseModel):
    run_id: int
    name: str
    policy: str
    rounds_done: int
    mean_latency_s: float | None
    efficiency: float | None = Field(description="1 − mean bubble fraction")
    peak_memory_bytes: float | None
    mean_energy_budget_ratio: float | None = Field(description="mean over devices and rounds of E/Ē")
    final_eval: dict[str, float]
    time_to_target_s: float | None = Field(
        description="modeled time to the target eval loss: Σ latency_s of the rounds up to the first "
        "whose eval_loss ≤ target_eval_loss; none without a target or if no stored round reached it"
    )
    rounds_to_target: int | None = Field(description="rounds from the first up to and including that one")
    ratios: dict[str, float | None] = Field(description="each figure divided by the baseline's")


class CompareOut(BaseModel):
    baseline_run_id: int
    target_eval_loss: float | None = Field(description="the target asked (none: no time to target)")
    runs: list[CompareRow]
