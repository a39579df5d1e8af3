"""Typed records a run emits, one ``RoundRecord`` and one ``DeviceRecord`` per device each round.

They are plain frozen dataclasses of JSON-ready values; ``to_json`` gives the dict the JSON-lines sink
writes and the service will store. Units are those of :mod:`collapipe_core.metrics`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeviceRecord:
    round: int
    cluster: int
    device: int
    device_id: str
    profile: str
    num_blocks: int
    block_start: int  # first TEB index held (block_end exclusive); equal when num_blocks = 0
    block_end: int
    bandwidth_share: float
    power_w: float
    rate_bps: float
    compute_s: float
    comm_s: float
    idle_s: float
    energy_j: float
    queue: float  # Q_k(t) the decision saw
    memory_bytes: float
    memory_capacity_bytes: float
    energy_budget_j: float
    available: bool
    # measured by the distributed executor (empty otherwise): compute_s, send_s, recv_s, idle_s,
    # peak_rss_bytes, peak_tensor_bytes, ... — the same units as the modeled fields
    measured: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RoundRecord:
    round: int
    policy: str
    latency_s: float
    aggregation_s: float
    objective: float
    objective_latency: float
    objective_convergence: float
    objective_energy: float
    convergence: float
    num_microbatches: list[int]  # per cluster
    makespan_s: list[float]  # per cluster, one iteration
    bubble_fraction: list[float]  # per cluster
    solve_time_s: float
    solver_iterations: int
    feasible: bool
    violations: list[str]
    train_loss: float | None = None
    eval_loss: float | None = None
    eval_metrics: dict[str, float] = field(default_factory=dict)
    decision: dict[str, Any] = field(default_factory=dict)
    # measured by the distributed executor (empty otherwise), per participant id: "c0-cu" (CU),
    # "c0-d1" (a scheduled device; the same dict as its DeviceRecord.measured), "c0-edge" (edge
    # server). Kept in the round record so the CU's and the edge server's figures, which have no
    # DeviceRecord, are stored with the round (the service keeps the round record as JSON).
    measured: dict[str, dict[str, float]] = field(default_factory=dict)
    # the gradient noise scale B_noise = tr(Σ)/|G|² (samples), from the training steps' gradient norms
    # (collapipe_core.gradient_noise): the running average over the rounds so far, and this round's own
    # estimates of tr(Σ) (per sample) and |G|². None without training, or without a step of M ≥ 2
    # (and B_noise while the averaged |G|² is not positive)
    gradient_noise_scale: float | None = None
    gradient_variance: float | None = None
    gradient_sq_norm: float | None = None
    # the redistribution before the first iteration (collapipe_core.costmodel.redistribution): TEBs
    # whose optimizer state changed device since the previous round (total over clusters), each
    # cluster's R_n, and the share of latency_s the moves cost ((T − T with no TEB moved) / T; None
    # when T is not finite). None / empty in records written before redistribution was modeled
    blocks_moved: int | None = None
    redistribution_s: list[float] = field(default_factory=list)
    moves_latency_share: float | None = None
    # why the decision is what it is (collapipe_core.explain): counterfactual decisions evaluated on the
    # same round state, each with its cost difference by term, and a sentence; empty in older records
    explanation: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RoundResult:
    """Everything one round produced: the round record and a record per device."""

    round: RoundRecord
    devices: tuple[DeviceRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round.to_json(), "devices": [d.to_json() for d in self.devices]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> RoundResult:
        return RoundResult(
            round=RoundRecord(**data["round"]),
            devices=tuple(DeviceRecord(**d) for d in data["devices"]),
        )
