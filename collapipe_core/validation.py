"""Load and check an experiment config; every problem names the field path, the value and the fix.

Parsing errors (types, bounds) come from pydantic and are translated; cross-field checks that need
the data set or the cost model (memory feasibility, micro-batches against data) are done here.
Nothing runs until the config passes.

What a config may name — files and policies — and the memory a run may use depend on where it runs:
every check takes a :class:`~collapipe_core.workspace.Workspace` (the local one for the CLI, the
service's for the API and its workers).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from collapipe_core.config import (
    DATASET_KINDS,
    DATASETS,
    DATASETS_CAUSAL_LM,
    MAX_DEVICE_ROUNDS,
    USER_FILES,
    ExperimentConfig,
)
from collapipe_core.costmodel.host import host_memory_bytes
from collapipe_core.costmodel.problem import device_memory_bytes
from collapipe_core.costmodel.profile import ModelProfile
from collapipe_core.models.peft import peft_problems
from collapipe_core.network import DeviceTrace
from collapipe_core.quote import json_value, short
from collapipe_core.state import build_environment, load_device_trace, pretrained_dir
from collapipe_core.workspace import FileRefused, Workspace


@dataclass(frozen=True)
class ConfigProblem:
    field: str  # dotted path, e.g. "channel.bandwidth_hz"
    value: Any
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} (got {short(self.value)})"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON; the value is quoted by at most a short prefix."""
        return {"field": self.field, "value": json_value(self.value), "message": self.message}


class ConfigError(ValueError):
    """A config that cannot run; ``problems`` lists each one."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in problems))


def parse_config(data: dict[str, Any], workspace: Workspace | None = None) -> ExperimentConfig:
    """Parse a dict into an ExperimentConfig and run every check; raises ConfigError.

    ``workspace``: where the config runs (default: the local CLI's: plain paths, import paths).
    """
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem("(root)", data, "the config must be a mapping of sections")])
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError([_translate(e) for e in err.errors()]) from None
    workspace = workspace or Workspace.local()
    config, problems = with_pretrained_sizes(config, workspace)
    # a checkpoint whose config.json was refused is never built (10^6 layers held a thread for minutes)
    problems += check_config(config, workspace, build=not problems)
    if problems:  # both steps resolve model.pretrained_path: its refusal once
        unique = {(problem.field, problem.message): problem for problem in problems}
        raise ConfigError(list(unique.values()))
    return config


SIZE_FIELDS = (
    "d_model",
    "num_heads",
    "num_kv_heads",
    "ffn_dim",
    "num_blocks",
    "num_decoder_layers",
    "vocab_size",
)


def with_pretrained_sizes(
    config: ExperimentConfig, workspace: Workspace
) -> tuple[ExperimentConfig, list[ConfigProblem]]:
    """With ``model.pretrained_path``, the model's sizes are the checkpoint's: size fields the config
    leaves out take config.json's values; a size field the config sets must agree with it (a problem
    naming both otherwise), and the checkpoint's positions must hold seq_len (and bart's target_len)."""
    m = config.model
    if m.pretrained_path is None:
        return config, []
    from collapipe_core.models.hf.pretrained import pretrained_sizes

    try:
        directory = pretrained_dir(config, workspace)
        assert directory is not None
        workspace.path("model.pretrained_path", f"{m.pretrained_path.rstrip('/')}/config.json")  # not leaving
        sizes = pretrained_sizes(directory, m.pretrained_path)  # messages name the config's path
    except FileRefused as err:
        return config, [ConfigProblem(err.field, err.value, err.message)]
    except ValueError as err:
        return config, [ConfigProblem("model.pretrained_path", m.pretrained_path, str(err))]
    name = short(m.pretrained_path)
    if sizes.architecture != m.architecture:
        return config, [
            ConfigProblem(
                "model.architecture",
                m.architecture,
                f"model.pretrained_path {name} holds a {sizes.architecture} model; set "
                f"model.architecture: {sizes.architecture}",
            )
        ]
    problems, updates = [], {}
    for field in SIZE_FIELDS:
        theirs = getattr(sizes, field)
        if theirs is None:
            continue
        ours = getattr(m, field)
        if field in m.model_fields_set and ours is not None and ours != theirs:
            problems.append(
                ConfigProblem(
                    f"model.{field}",
                    ours,
                    f"conflicts with model.pretrained_path {name}, whose config.json gives {theirs}; "
                    f"remove model.{field} (it is read from the checkpoint) or set it to {theirs}",
                )
            )
        updates[field] = theirs
    lengths = [("seq_len", m.seq_len)] + ([("target_len", m.target_len)] if m.kind == "seq2seq" else [])
    for field, length in lengths:
        if length > sizes.max_positions:
            problems.append(
                ConfigProblem(
                    f"model.{field}",
                    length,
                    f"longer than the {sizes.max_positions} positions of model.pretrained_path {name}; "
                    f"use at most {sizes.max_positions}",
                )
            )
    return config.model_copy(update={"model": m.model_copy(update=updates)}), problems


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Read YAML or JSON from ``path`` (optionally overriding dotted fields) and validate it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            [ConfigProblem("(file)", str(path), f"cannot read the config: {err.strerror}")]
        ) from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else read_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigError([ConfigProblem("(file)", str(path), f"not valid YAML/JSON: {err}")]) from None
    data = data or {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    return parse_config(data)


_MODEL_FIELD = re.compile(r"^(model\.[a-z_]+(?:\.[a-z0-9_]+)?)\b")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading 1e9 and 2.5e8 as numbers (YAML 1.2) rather than strings."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(text: str) -> Any:
    """A YAML document as configs are read: safe types only, 1e9 and 2.5e8 numbers (YAML 1.2)."""
    return yaml.load(text, Loader=_Loader)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def _translate(error: Any) -> ConfigProblem:
    field = ".".join(str(p) for p in error["loc"]) or "(root)"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if error["type"] == "extra_forbidden":
        message = "unknown field; remove it or check its spelling against `collapipe config schema`"
    elif error["type"] in ("float_type", "int_type") and isinstance(value, str):
        message += (
            "; numbers are never text (PyYAML reads 4.0e9 as text: write 4.0e+9, or the plain digits "
            "of an integer)"
        )
    elif error["type"] == "int_type" and isinstance(value, float):
        message += f" (a whole number, not {short(value)})"
    return ConfigProblem(field, value, message)


def check_config(
    config: ExperimentConfig, workspace: Workspace, *, build: bool = True
) -> list[ConfigProblem]:
    """Cross-field checks in ``workspace``. Returns every problem found (empty when the config can run).

    ``build``: also read the data and build the model (the memory checks), when no problem was found."""
    problems: list[ConfigProblem] = []
    m, d, t, s = config.model, config.data, config.training, config.scheduler

    def add(field: str, value: Any, message: str) -> None:
        problems.append(ConfigProblem(field, value, message))

    problems.extend(peft_problems(config))
    devices = config.network.num_clusters * config.network.devices_per_cluster
    if devices * t.rounds > MAX_DEVICE_ROUNDS:
        add(
            "training.rounds",
            t.rounds,
            f"{devices} devices × {t.rounds} rounds = {devices * t.rounds} device records, more than "
            f"{MAX_DEVICE_ROUNDS:,}; run at most {MAX_DEVICE_ROUNDS // devices} rounds, or fewer devices",
        )
    if d.dataset not in DATASETS:
        add("data.dataset", d.dataset, f"unknown dataset; choose one of {', '.join(DATASETS)}")
    elif d.dataset in DATASET_KINDS and DATASET_KINDS[d.dataset] != m.kind:
        kind = DATASET_KINDS[d.dataset]
        same = [name for name, k in DATASET_KINDS.items() if k == m.kind] + [USER_FILES]
        add(
            "data.dataset",
            d.dataset,
            f"is a {kind} dataset but model.kind is {m.kind}; use one of {', '.join(same)} or set "
            f"model.kind: {kind}",
        )
    if m.kind == "seq2seq" and m.num_decoder_layers < 1:
        add(
            "model.num_decoder_layers", m.num_decoder_layers, "a seq2seq model needs at least 1 decoder layer"
        )
    b = t.fixed_microbatch_size
    if t.batch_size is not None:
        problems.extend(_batch_problems(config))
    elif b is not None and b > d.samples_per_cluster:
        add(
            "training.microbatch_size",
            b,
            f"larger than a cluster's data (data.samples_per_cluster = {d.samples_per_cluster})",
        )
    elif b is not None and s.num_microbatches * b > d.samples_per_cluster:
        add(
            "scheduler.num_microbatches",
            s.num_microbatches,
            f"M·b = {s.num_microbatches * b} exceeds a cluster's data "
            f"({d.samples_per_cluster} samples); lower M or the micro-batch size",
        )
    elif s.num_microbatches > s.max_microbatches:
        add(
            "scheduler.num_microbatches",
            s.num_microbatches,
            f"exceeds scheduler.max_microbatches ({s.max_microbatches})",
        )
    problems.extend(_check_policy(config, workspace))
    trace = pretrained = None
    try:
        trace = load_device_trace(config, workspace)
        pretrained = pretrained_dir(config, workspace)
    except FileRefused as err:
        add(err.field, err.value, err.message)
    if not problems and build:
        problems.extend(_check_data_and_memory(config, workspace, trace, pretrained))
    return problems


def _batch_problems(config: ExperimentConfig) -> list[ConfigProblem]:
    """The fixed batch B: M micro-batches of exactly B/M samples, B within a cluster's data."""
    t, s, d = config.training, config.scheduler, config.data
    batch = t.batch_size
    assert batch is not None
    problems: list[ConfigProblem] = []
    if batch > d.samples_per_cluster:
        problems.append(
            ConfigProblem(
                "training.batch_size",
                batch,
                f"a step draws B = {batch} samples but a cluster holds data.samples_per_cluster = "
                f"{d.samples_per_cluster}; lower training.batch_size or raise data.samples_per_cluster",
            )
        )
    if s.num_microbatches > batch or batch % s.num_microbatches:
        fits = [m for m in range(1, min(batch, s.max_microbatches) + 1) if batch % m == 0]
        problems.append(
            ConfigProblem(
                "scheduler.num_microbatches",
                s.num_microbatches,
                f"must divide training.batch_size = {batch} (every micro-batch holds B/M samples); "
                f"choose one of {', '.join(map(str, fits))}",
            )
        )
    if s.max_microbatches > batch:
        problems.append(
            ConfigProblem(
                "scheduler.max_microbatches",
                s.max_microbatches,
                f"exceeds training.batch_size = {batch}: a micro-batch holds at least one sample; set "
                f"scheduler.max_microbatches to at most {batch}",
            )
        )
    elif s.num_microbatches > s.max_microbatches:
        problems.append(
            ConfigProblem(
                "scheduler.num_microbatches",
                s.num_microbatches,
                f"exceeds scheduler.max_microbatches ({s.max_microbatches})",
            )
        )
    return problems


def _check_policy(config: ExperimentConfig, workspace: Workspace) -> list[ConfigProblem]:
    s, blocks, devices = config.scheduler, config.model.num_blocks, config.network.devices_per_cluster
    problems: list[ConfigProblem] = []
    problem = workspace.policies.problem(s.policy)
    if problem is not None:
        problems.append(ConfigProblem("scheduler.policy", s.policy, problem))
    if s.segments is not None:
        if len(s.segments) != devices:
            problems.append(
                ConfigProblem(
                    "scheduler.segments",
                    s.segments,
                    f"needs one entry per device ({devices}), has {len(s.segments)}",
                )
            )
        elif any(x < 0 for x in s.segments) or sum(s.segments) != blocks:
            problems.append(
                ConfigProblem(
                    "scheduler.segments",
                    s.segments,
                    f"must be non-negative and sum to model.num_blocks = {blocks}, sums to {sum(s.segments)}",
                )
            )
    elif s.policy == "fixed":
        problems.append(ConfigProblem("scheduler.segments", None, "policy 'fixed' needs TEBs per device"))
    return problems


def _check_data_and_memory(
    config: ExperimentConfig, workspace: Workspace, trace: DeviceTrace | None, pretrained: Path | None
) -> list[ConfigProblem]:
    from collapipe_core.data import DataError, dataset_size, load_dataset, vocab_sizes

    d, net = config.data, config.network
    problems: list[ConfigProblem] = []
    try:
        if d.dataset in (USER_FILES, *DATASETS_CAUSAL_LM):
            load_dataset(config, workspace)  # the files' every check, and the exact sample count
        available = dataset_size(config, workspace)
        src_vocab, tgt_size = vocab_sizes(config, workspace)
    except DataError as err:
        return [ConfigProblem(err.field, err.value, err.message)]
    except ValueError as err:
        return [ConfigProblem("data", d.dataset, str(err))]
    needed = d.eval_samples + net.num_clusters * d.samples_per_cluster
    if needed > available:
        problems.append(
            ConfigProblem(
                "data.samples_per_cluster",
                d.samples_per_cluster,
                f"{net.num_clusters} clusters × {d.samples_per_cluster} + {d.eval_samples} eval samples "
                f"= {needed}, but {d.dataset} has {available} usable samples at model.seq_len = "
                f"{config.model.seq_len}; lower data.samples_per_cluster or data.eval_samples",
            )
        )
    try:
        env = build_environment(config, src_vocab, tgt_size, trace, pretrained)
    except Exception as err:  # the model cannot be built: a field the message names, or the model
        named = _MODEL_FIELD.match(str(err))
        if named or isinstance(err, ValueError):
            field = named.group(1) if named else "model"
            return [*problems, ConfigProblem(field, None, str(err))]
        if config.model.source != "transformers":
            raise  # CollaPipe's own models: a bug, not the user's input
        return [*problems, _not_built(config, err)]
    problems.extend(host_memory_problems(config, env.profile, workspace.memory_limit_bytes))
    # the M that needs the least memory: one micro-batch of b samples, or with a fixed batch the most
    # micro-batches (B/M_max samples each; GPipe keeps all M in flight, 1F1B at best one)
    st = env.settings
    micro = 1 if st.batch_size is None else st.microbatch_limit
    b = st.samples_per_microbatch(micro)
    in_flight = micro if config.training.schedule == "gpipe" else 1
    overhead, prof = env.scenario.runtime_overhead_bytes, env.profile
    working = b * prof.block_activation_bytes + prof.block_activation_fixed_bytes
    again = b * prof.block_recompute_activation_bytes + prof.block_recompute_activation_fixed_bytes
    # (what a TEB keeps per micro-batch in flight, the backward's working set) without and with
    # recomputation; a device may take either under auto (costmodel.problem, the memory formula)
    ways = {"none": [(working, working)], "all": [(again, 2.0 * working)]}
    ways["auto"] = ways["none"] + ways["all"]
    options = [
        (
            # what a scheduled device holds besides its TEBs at that M (costmodel.device_memory_bytes)
            float(
                device_memory_bytes(
                    0, in_flight, micro, 0.0, kept, 2.0 * b * prof.payload_bytes, overhead, work
                )
            ),
            prof.block_state_bytes + in_flight * kept,
        )
        for kept, work in ways[config.training.activation_checkpointing]
    ]
    problems.extend(memory_problems(env.scenario.memory_bytes, options, config.model.num_blocks, micro))
    return problems


def _not_built(config: ExperimentConfig, err: Exception) -> ConfigProblem:
    """Whatever transformers raised building or measuring a model from a checkpoint or hf_config."""
    m = config.model
    value: str | None = m.pretrained_path
    if m.pretrained_path is not None:
        field, source = "model.pretrained_path", "the checkpoint's config.json"
        fix = "fix config.json or save the model again with save_pretrained"
    else:
        field, source = ("model.hf_config", "model.hf_config") if m.hf_config else ("model", "its sizes")
        fix = "change these fields"
    reason = (str(err).splitlines() or [""])[0][:200]
    return ConfigProblem(
        field,
        value,
        f"transformers cannot build a {m.architecture} model from {source} "
        f"({type(err).__name__}: {reason}); {fix}",
    )


def memory_problems(
    capacity_bytes: np.ndarray, options: list[tuple[float, float]], blocks: int, micro: int = 1
) -> list[ConfigProblem]:
    """Refuse a network where even the most favourable placement (at the M that needs the least memory,
    ``micro``: 1, or the most with a fixed batch) cannot hold the encoder.

    ``options``: the ways a device may hold TEBs, each (fixed, per TEB) bytes — without recomputation and,
    where the config allows it, with. In the best of them a device fits cap_k = ⌊(memory_k − fixed) /
    per TEB⌋ TEBs, fixed being the runtime overhead, one micro-batch's backward working set and its
    receive buffers, per TEB its state and what the micro-batches in flight keep; contiguous segments with
    δ_k ≤ cap_k exist iff Σ_k cap_k ≥ L in every cluster. The message names the cluster's largest device
    and how much more memory it would need to take the missing TEBs.
    """
    caps_of = [np.maximum(np.floor((capacity_bytes - fixed) / per), 0) for fixed, per in options]
    caps = np.max(caps_of, axis=0)
    fixed_bytes, per_block = options[int(np.argmax([c.sum() for c in caps_of]))]
    short = [n for n, row in enumerate(caps) if row.sum() < blocks]
    if not short:
        return []
    n = short[0]
    best = int(np.argmax(capacity_bytes[n]))
    missing = blocks - int(caps[n].sum())
    needed = fixed_bytes + (caps[n, best] + missing) * per_block
    shortfall = needed - capacity_bytes[n, best]
    others = f" (and {len(short) - 1} more clusters)" if len(short) > 1 else ""
    return [
        ConfigProblem(
            "network.memory_bytes",
            float(capacity_bytes[n, best]),
            f"cluster {n}{others} cannot hold the encoder in any placement: its devices fit "
            f"{int(caps[n].sum())} of {blocks} TEBs ({per_block / 2**20:.2f} MiB each at M = {micro}, plus "
            f"{fixed_bytes / 2**20:.0f} MiB of runtime and pipeline buffers); its largest device "
            f"c{n}-d{best} has "
            f"{capacity_bytes[n, best] / 2**20:.1f} MiB and is short by {shortfall / 2**20:.1f} MiB "
            "to take the rest; give devices more memory or use a smaller model",
        )
    ]


def host_memory_problems(
    config: ExperimentConfig, profile: ModelProfile, limit_bytes: int | None
) -> list[ConfigProblem]:
    """Refuse a run whose modeled memory on the worker (costmodel/host.py) exceeds ``limit_bytes``."""
    if limit_bytes is None:
        return []
    needed = host_memory_bytes(config, profile)
    if needed <= limit_bytes:
        return []
    m = config.model
    vocab = m.vocab_size if m.vocab_size is not None else "the data's"
    sizes = (
        f"model.d_model = {m.d_model}, model.ffn_dim = {m.ffn_dim}, model.num_blocks = "
        f"{m.num_blocks}, model.vocab_size = {vocab}"
    )
    return [
        ConfigProblem(
            "model",
            None,
            f"the {config.executor} executor would need about {needed / 2**30:.1f} GiB on a worker "
            f"(weights, gradients and {config.training.optimizer} state of {profile.total_params:,} "
            f"parameters for {config.network.num_clusters} clusters, and activations), but a worker may use "
            f"{limit_bytes / 2**30:.1f} GiB (COLLAPIPE_WORKER_MEMORY_BYTES); make the model smaller "
            f"({sizes}), use fewer clusters, or run it with executor: analytic",
        )
    ]
