"""Calibration: measure the gradient noise scale B_noise in a short real training.

The ``analytic`` executor trains nothing and so measures no B_noise; a config gives it for such runs
in ``scheduler.gradient_noise_scale``. :func:`calibrate` measures it: the config's model and data are
trained for a few rounds by the ``simulated`` executor, with the ``uniform`` policy and a fixed number of
micro-batches M ≥ 2 (a step of one micro-batch measures nothing, and a policy that chooses M could
choose 1), and the rounds' estimates are averaged as in any run (:mod:`collapipe_core.gradient_noise`).
The measurement starts from the config's initial weights: B_noise grows as the loss falls, so a
calibration of the first rounds is a lower estimate for later ones. ``collapipe calibrate`` writes the
result into the config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collapipe_core.config import ExperimentConfig
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from collapipe_core.validation import parse_config
from collapipe_core.workspace import Workspace

DEFAULT_ROUNDS = 5


class CalibrationError(ValueError):
    """The calibration could not run, or measured no noise scale; the message says what to change."""


@dataclass(frozen=True)
class Calibration:
    gradient_noise_scale: float  # B_noise, samples
    gradient_variance: float  # tr(Σ) averaged over the rounds (per sample)
    gradient_sq_norm: float  # |G|² averaged over the rounds
    rounds: int
    num_microbatches: int  # M of every step
    microbatch_size: int  # b


def calibration_config(
    config: ExperimentConfig,
    rounds: int = DEFAULT_ROUNDS,
    num_microbatches: int | None = None,
    workspace: Workspace | None = None,
) -> ExperimentConfig:
    """The config the calibration trains: ``config`` with the simulated executor, ``rounds`` rounds and
    the uniform policy at ``num_microbatches`` (default: scheduler.num_microbatches, at least 2)."""
    if rounds < 1:
        raise CalibrationError(f"rounds = {rounds}: calibrate for at least 1 round")
    m = max(2, config.scheduler.num_microbatches) if num_microbatches is None else num_microbatches
    t, samples = config.training, config.data.samples_per_cluster
    if m < 2:
        raise CalibrationError(
            f"{m} micro-batch: the noise scale needs at least 2 micro-batches per step; use 2 or more"
        )
    if t.batch_size is not None and (m > t.batch_size or t.batch_size % m):
        divisors = [d for d in range(2, t.batch_size + 1) if t.batch_size % d == 0]
        raise CalibrationError(
            f"{m} micro-batches do not split training.batch_size = {t.batch_size} into equal micro-batches; "
            f"use one of {', '.join(map(str, divisors))}"
        )
    b = t.samples_per_microbatch(m)
    if t.batch_size is None and m * b > samples:
        raise CalibrationError(
            f"{m} micro-batches of {b} samples exceed a cluster's data (data.samples_per_cluster = "
            f"{samples}); use at most {samples // b} micro-batches, or a smaller training.microbatch_size"
        )
    data: dict[str, Any] = config.model_dump(mode="json", by_alias=True)
    data["executor"] = "simulated"
    data["training"]["rounds"] = rounds
    limit = max(m, config.scheduler.max_microbatches)
    if t.batch_size is not None:
        limit = min(limit, t.batch_size)
    data["scheduler"].update(policy="uniform", num_microbatches=m, max_microbatches=limit)
    return parse_config(data, workspace)


def calibrate(
    config: ExperimentConfig,
    rounds: int = DEFAULT_ROUNDS,
    num_microbatches: int | None = None,
    workspace: Workspace | None = None,
    on_round: Callable[[RoundResult], None] | None = None,
) -> Calibration:
    """Train ``config`` briefly (:func:`calibration_config`) and return the B_noise it measured."""
    trained = calibration_config(config, rounds, num_microbatches, workspace)
    runner = Runner(trained, MemorySink(), workspace=workspace)
    runner.run(on_round=on_round)
    value, averages = runner.gradient_noise.noise_scale, runner.gradient_noise.averages()
    m = trained.scheduler.num_microbatches
    b = trained.training.samples_per_microbatch(m)
    if value is None or averages is None:
        raise CalibrationError(
            f"{rounds} rounds of {m} micro-batches of {b} samples did not resolve the gradient from its "
            f"noise (the averaged |G|² estimate is not positive): calibrate for more rounds, or with "
            "more micro-batches"
        )
    return Calibration(
        gradient_noise_scale=value,
        gradient_variance=averages.trace,
        gradient_sq_norm=averages.sq_norm,
        rounds=rounds,
        num_microbatches=m,
        microbatch_size=b,
    )
