"""The executor interface and the ``analytic`` executor.

An executor carries out one round's decision. ``analytic`` trains nothing: the cost model's figures
are the round. ``simulated`` (:mod:`collapipe_core.pipeline.simulated`) also trains the real split
model. Both report through the same :class:`TrainingOutcome`; an executor that trains also reports
the round's estimate of the gradient noise (:mod:`collapipe_core.gradient_noise`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from collapipe_core.config import TrainingConfig
from collapipe_core.decision import Decision
from collapipe_core.gradient_noise import NoiseEstimate
from collapipe_core.state import RoundState


@dataclass(frozen=True)
class TrainingOutcome:
    train_loss: float | None = None
    eval_loss: float | None = None
    eval_metrics: dict[str, float] = field(default_factory=dict)
    measured: dict[str, dict[str, float]] = field(default_factory=dict)  # device id → measured figures
    gradient_noise: NoiseEstimate | None = None  # the round's tr(Σ) and |G|²; None: no step had M ≥ 2


def recompute_flags(training: TrainingConfig, decision: Decision) -> npt.NDArray[np.bool_]:
    """(N, K): the devices that recompute their blocks' activations in backward this round.

    ``training.activation_checkpointing``: ``none``, no device; ``all``, every device; ``auto``, the
    decision's per-device flags (``Decision.recompute()``, what the scheduler chose) — as the cost model
    charges them.
    """
    flags = decision.recompute()
    mode = training.activation_checkpointing
    return flags if mode == "auto" else np.full_like(flags, mode == "all")


class Executor(Protocol):
    name: str

    def execute(self, state: RoundState, decision: Decision) -> TrainingOutcome: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class AnalyticExecutor:
    """No training: timing, energy and memory come from the cost model alone."""

    name = "analytic"

    def execute(self, state: RoundState, decision: Decision) -> TrainingOutcome:
        return TrainingOutcome()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
