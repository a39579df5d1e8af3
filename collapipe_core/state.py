"""What a policy observes at the start of a round, and the static context it is built from.

``Environment`` is built once per run (devices, model costs, trace, settings); ``RoundState`` adds the
round's channel gains, device conditions, the Lyapunov virtual queues Q_k(t) and where the previous
round left the encoder (``Placement``: its segments and links, from which the cost model charges the
blocks that change device).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel.problem import microbatch_choices
from collapipe_core.costmodel.profile import ModelProfile, build_profile
from collapipe_core.decision import Decision
from collapipe_core.network import (
    MAX_TRACE_BYTES,
    BoolArray,
    DeviceTrace,
    FloatArray,
    IntArray,
    Scenario,
    TraceError,
    build_scenario,
    channel_gains,
    parse_trace,
)
from collapipe_core.quote import short
from collapipe_core.workspace import FileRefused, Workspace


@dataclass(frozen=True)
class Settings:
    """The training and scheduling constants a policy and the cost model need."""

    microbatch_size: int | None  # b of the fixed micro-batch reading (None: the batch is fixed)
    batch_size: int | None  # B of the fixed batch reading: M micro-batches of B/M samples
    local_iterations: int  # I
    schedule: Literal["gpipe", "1f1b"]
    checkpointing: Literal["none", "all", "auto"]  # training.activation_checkpointing
    V: float
    lambda_: float
    gradient_variance: float  # σ²
    convergence: Literal["variance", "noise_scale"]  # the objective's convergence term
    gradient_noise_scale: float | None  # B_noise from the config (samples)
    num_microbatches: int  # M of fixed-M baselines
    max_microbatches: int
    samples_per_cluster: int
    segments: tuple[int, ...] | None
    seed: int

    @staticmethod
    def from_config(config: ExperimentConfig) -> Settings:
        t, s = config.training, config.scheduler
        return Settings(
            microbatch_size=t.fixed_microbatch_size,
            batch_size=t.batch_size,
            local_iterations=t.local_iterations,
            schedule=t.schedule,
            checkpointing=t.activation_checkpointing,
            V=s.V,
            lambda_=s.lambda_,
            gradient_variance=s.gradient_variance,
            convergence=s.convergence,
            gradient_noise_scale=s.gradient_noise_scale,
            num_microbatches=s.num_microbatches,
            max_microbatches=s.max_microbatches,
            samples_per_cluster=config.data.samples_per_cluster,
            segments=tuple(s.segments) if s.segments is not None else None,
            seed=config.seed,
        )

    @property
    def microbatch_choices(self) -> IntArray:
        """The M a decision may take, ascending: 1..M_max with M·b within a cluster's data, or with a fixed
        batch B the divisors of B up to M_max (every micro-batch holds B/M samples)."""
        if self.batch_size is not None:
            return microbatch_choices(self.batch_size, min(self.max_microbatches, self.batch_size))
        assert self.microbatch_size is not None
        return microbatch_choices(
            None, min(self.max_microbatches, self.samples_per_cluster // self.microbatch_size)
        )

    @property
    def microbatch_limit(self) -> int:
        """Largest M (the last of :attr:`microbatch_choices`)."""
        return int(self.microbatch_choices[-1])

    def samples_per_microbatch(self, num_microbatches: int) -> int:
        """b at M micro-batches: the fixed b, or B/M."""
        if self.batch_size is not None:
            return self.batch_size // num_microbatches
        assert self.microbatch_size is not None
        return self.microbatch_size

    def samples_per_step(self, num_microbatches: int) -> int:
        """Samples of one local step at M micro-batches: M·b, or B."""
        return num_microbatches * self.samples_per_microbatch(num_microbatches)


@dataclass(frozen=True, eq=False)
class Environment:
    scenario: Scenario
    profile: ModelProfile
    settings: Settings
    trace: DeviceTrace | None = None


@dataclass(frozen=True, eq=False)
class Placement:
    """Where a round left the encoder: each device's segment and the link it used, all (N, K).

    The next round's cost model moves the optimizer state of every TEB whose device changes
    (:mod:`collapipe_core.costmodel.redistribution`): its previous holder uploads it to the CU at the
    rate and power of this placement, the links still in effect until the new decision's are set up.
    """

    num_blocks: IntArray  # δ_prev: TEBs per device, contiguous in device order (decision.plan_segments)
    rate_bps: FloatArray  # r_prev: the device's link rate in that round
    power_w: FloatArray  # p_prev: the device's transmit power in that round
    mode: Literal["pipeline", "replicated"] = "pipeline"  # replicated (fl): a participant holds every TEB

    @staticmethod
    def of(decision: Decision, rate_bps: FloatArray) -> Placement:
        """The placement a round's ``decision`` leaves, with the link rates its evaluation modeled."""
        return Placement(
            num_blocks=decision.num_blocks(),
            rate_bps=np.array(rate_bps, dtype=np.float64),
            power_w=decision.power_w(),
            mode=decision.mode,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "num_blocks": self.num_blocks.tolist(),
            "rate_bps": self.rate_bps.tolist(),
            "power_w": self.power_w.tolist(),
            "mode": self.mode,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Placement:
        mode = data.get("mode", "pipeline")
        if mode not in ("pipeline", "replicated"):
            raise ValueError(f"placement mode must be 'pipeline' or 'replicated', got {mode!r}")
        return Placement(
            num_blocks=np.asarray(data["num_blocks"], dtype=np.int64),
            rate_bps=np.asarray(data["rate_bps"], dtype=np.float64),
            power_w=np.asarray(data["power_w"], dtype=np.float64),
            mode=mode,
        )


@dataclass(frozen=True, eq=False)
class RoundState:
    round_index: int
    env: Environment
    gain: FloatArray  # h, (N, K)
    available: BoolArray  # (N, K)
    speed_factor: FloatArray  # (N, K), multiplies FLOP/s
    queues: FloatArray  # Q_k(t), (N, K), ≥ 0
    # the previous round's segments δ_prev, rates r_prev and powers p_prev; None at a run's first round
    # (or for a state built without one): no block changes device, the segments' weights are still sent
    previous: Placement | None = None
    # B_noise measured in training so far (samples; the runner's average), None before any measurement
    measured_noise_scale: float | None = None

    @property
    def noise_scale(self) -> float:
        """B_noise for the objective: measured in training, else the config's (0 when neither)."""
        if self.measured_noise_scale is not None:
            return self.measured_noise_scale
        return self.settings.gradient_noise_scale or 0.0

    @property
    def scenario(self) -> Scenario:
        return self.env.scenario

    @property
    def profile(self) -> ModelProfile:
        return self.env.profile

    @property
    def settings(self) -> Settings:
        return self.env.settings


def load_device_trace(config: ExperimentConfig, workspace: Workspace) -> DeviceTrace | None:
    """The config's ``network.trace_file`` read through ``workspace``; FileRefused names the field."""
    name = config.network.trace_file
    if name is None:
        return None
    text = workspace.read_text("network.trace_file", name, MAX_TRACE_BYTES)
    try:
        return parse_trace(
            text,
            name.lower().endswith(".json"),
            config.network.num_clusters,
            config.network.devices_per_cluster,
        )
    except TraceError as err:
        raise FileRefused("network.trace_file", name, f"{short(name)}, {err}") from None


PRETRAINED_FIELD = "model.pretrained_path"


def pretrained_dir(config: ExperimentConfig, workspace: Workspace) -> Path | None:
    """The directory ``model.pretrained_path`` names, resolved through ``workspace`` and holding a
    config.json; FileRefused naming the field (a Hub name or URL is never fetched)."""
    name = config.model.pretrained_path
    return None if name is None else checkpoint_dir(name, workspace)


def checkpoint_dir(name: str, workspace: Workspace) -> Path:
    """The checkpoint directory ``name`` (a ``model.pretrained_path``) as :func:`pretrained_dir`
    resolves it."""
    from collapipe_core.models.hf.pretrained import checked_pretrained_dir, looks_like_hub_name

    if "://" in name:
        raise FileRefused(PRETRAINED_FIELD, name, f"{short(name)} is a URL; CollaPipe never downloads models")
    try:
        directory = workspace.directory(PRETRAINED_FIELD, name)
        return checked_pretrained_dir(directory, name)  # messages name the config's path
    except FileRefused as err:
        hint = (
            "; it looks like a Hugging Face Hub name, and CollaPipe never downloads models: save the model "
            "with save_pretrained into a directory and give that"
            if looks_like_hub_name(name)
            else ""
        )
        raise FileRefused(err.field, name, err.message + hint) from None
    except ValueError as err:
        raise FileRefused(PRETRAINED_FIELD, name, str(err).removeprefix(f"{PRETRAINED_FIELD} ")) from None


def build_environment(
    config: ExperimentConfig,
    src_vocab: int,
    tgt_size: int,
    trace: DeviceTrace | None,
    pretrained: Path | None = None,
) -> Environment:
    """The run's static context; ``trace`` is :func:`load_device_trace`'s (None: no trace) and
    ``pretrained`` :func:`pretrained_dir`'s (the checkpoint whose architecture the profile measures)."""
    scenario = build_scenario(config)
    return Environment(
        scenario=scenario,
        profile=build_profile(config, src_vocab, tgt_size, pretrained),
        settings=Settings.from_config(config),
        trace=trace,
    )


def observe(
    env: Environment,
    round_index: int,
    queues: FloatArray | None = None,
    previous: Placement | None = None,
    measured_noise_scale: float | None = None,
) -> RoundState:
    """The state of round ``round_index``: identical for every policy given the same environment,
    queues and ``previous`` placement (the one the round before left, None for the first round)."""
    shape = env.scenario.shape
    if env.trace is not None:
        speed, available = env.trace.at(round_index)
    else:
        speed, available = np.ones(shape), np.ones(shape, dtype=bool)
    q = np.zeros(shape) if queues is None else np.asarray(queues, dtype=np.float64)
    if q.shape != shape:
        raise ValueError(f"queues have shape {q.shape}, the network is {shape}")
    if np.any(q < 0):
        raise ValueError("virtual queues must be non-negative")
    if previous is not None:
        for name in ("num_blocks", "rate_bps", "power_w"):
            if getattr(previous, name).shape != shape:
                raise ValueError(
                    f"the previous placement's {name} has shape {getattr(previous, name).shape}, "
                    f"the network is {shape}"
                )
    return RoundState(
        round_index=round_index,
        env=env,
        gain=channel_gains(env.scenario, round_index),
        available=available,
        speed_factor=speed,
        queues=q,
        previous=previous,
        measured_noise_scale=measured_noise_scale,
    )


def update_queues(queues: FloatArray, energy_j: FloatArray, budget_j: FloatArray) -> FloatArray:
    """Lyapunov virtual energy queues: Q_k(t+1) = max(Q_k(t) + E_k(t) − Ē_k, 0)."""
    return np.maximum(queues + energy_j - budget_j, 0.0)
