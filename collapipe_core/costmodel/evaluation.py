"""What the cost model reports of one round under one decision (``costmodel.evaluate``)."""

from __future__ import annotations

from dataclasses import dataclass

from collapipe_core.costmodel.closed_form import Redistribution
from collapipe_core.network import FloatArray


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Modeled figures of one round under one decision (seconds, joules, bytes, bit/s)."""

    latency_s: float
    aggregation_s: float
    pipeline_s: FloatArray  # (N,) one iteration's makespan per cluster
    redistribution: Redistribution  # the phase before the first iteration: R_n, the block moves
    moves_latency_s: float  # the part of latency_s the block moves cost (T − T with no TEB moved)
    bubble_fraction: FloatArray  # (N,) 1 − device compute time / (scheduled devices × I·T^pipe)
    rate_bps: FloatArray  # (N, K)
    compute_s: FloatArray  # (N, K) per round
    comm_s: FloatArray  # (N, K) per round: pipeline transmissions + upload of the segment + moved state
    idle_s: FloatArray  # (N, K) per round: pipeline time neither computing nor transmitting
    energy_j: FloatArray  # (N, K)
    memory_bytes: FloatArray  # (N, K)
    convergence: float  # G: σ²/B_step or B_noise/B_step (closed_form.penalty)
    objective: float
    objective_latency: float  # V·T
    objective_convergence: float  # V·λ·G, or V·T·G with the noise-scale term
    objective_energy: float  # Σ Q·E
    violations: tuple[str, ...]

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def redistribution_s(self) -> FloatArray:
        """(N,) R_n: each cluster's redistribution before its first iteration."""
        return self.redistribution.latency_s

    @property
    def blocks_moved(self) -> FloatArray:
        """(N,) TEBs whose optimizer state changed device, per cluster."""
        moved: FloatArray = self.redistribution.moved_out.sum(axis=1)
        return moved
