"""Load and check an experiment config; every problem names the field path, the value and the fix.

Parsing errors (types, bounds) come from pydantic and are translated; cross-field checks that need
the data set or the cost model (memory feasibility, micro-batches against data) are done here.
Nothing runs until the config passes.

Every problem comes in one answer: a section that does not parse is read at its defaults and every
check that reads it is skipped (its answer would be about the defaults, not about the config); every
other check runs. The data are read when the sections they depend on parsed, and the model is built
(the memory checks) when every section parsed, whatever the other checks found, except after a
checkpoint whose config.json was refused (it is never built) — and it is built from the data's
vocabulary, so data that cannot be read leave its checks for the next answer.

What a config may name — files and policies — and the memory a run may use depend on where it runs:
every check takes a :class:`~collapipe_core.workspace.Workspace` (the local one for the CLI, the
service's for the API and its workers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from collapipe_core.checkpoint_checks import hf_config_problems, with_pretrained_sizes
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
from collapipe_core.data_capacity import DataCapacity, data_capacity
from collapipe_core.models.peft import peft_problems
from collapipe_core.network import DeviceTrace
from collapipe_core.problems import ConfigError as ConfigError
from collapipe_core.problems import ConfigProblem as ConfigProblem
from collapipe_core.problems import translated
from collapipe_core.state import (
    PRETRAINED_FIELD,
    build_environment,
    load_device_trace,
    pretrained_dir,
)
from collapipe_core.workspace import FileRefused, Workspace


def parse_config(data: dict[str, Any], workspace: Workspace | None = None) -> ExperimentConfig:
    """Parse a dict into an ExperimentConfig and run every check; raises ConfigError naming every
    problem found.

    ``workspace``: where the config runs (default: the local CLI's: plain paths, import paths).
    """
    config, problems, broken = parse_sections(data)
    if config is None:
        raise ConfigError(problems)
    workspace = workspace or Workspace.local()
    buildable = True
    if "model" not in broken:
        config, found, buildable = with_pretrained_sizes(config, workspace)
        problems += found
    problems += check_config(config, workspace, build=buildable, broken=broken)
    if problems:  # both steps resolve model.pretrained_path: its refusal once
        unique = {(problem.field, problem.message): problem for problem in problems}
        raise ConfigError(list(unique.values()))
    return config


SECTIONS = ("network", "channel", "model", "data", "training", "scheduler")
TOP_LEVEL = ("name", "seed", "executor")
EXPERIMENT = "experiment"  # the section the top-level fields form, for the checks that read them


def parse_sections(data: Any) -> tuple[ExperimentConfig | None, list[ConfigProblem], frozenset[str]]:
    """``data`` as a config, the problems pydantic found, and the sections they are in (``broken``:
    :data:`SECTIONS`, or :data:`EXPERIMENT` for the top-level fields). A broken section is read at its
    defaults, so that the checks of the other sections still run. None when the config cannot be
    read at all: not a mapping, an unknown top-level key (a misspelt section), a whole-config rule."""
    if not isinstance(data, dict):
        return None, [ConfigProblem("(root)", data, "the config must be a mapping of sections")], frozenset()
    try:
        return ExperimentConfig.model_validate(data), [], frozenset()
    except ValidationError as err:
        errors = err.errors()
    problems = [translated(e) for e in errors]
    broken = {_section_of(e["loc"]) for e in errors}
    if None in broken:
        return None, problems, frozenset()
    kept = {key: value for key, value in data.items() if _section_of((key,)) not in broken}
    try:
        config = ExperimentConfig.model_validate(kept)
    except ValidationError:  # a rule across sections: nothing more is checked
        return None, problems, frozenset()
    return config, problems, frozenset(name for name in broken if name is not None)


def _section_of(loc: tuple[Any, ...]) -> str | None:
    head = str(loc[0]) if loc else ""
    if head in SECTIONS:
        return head
    return EXPERIMENT if head in TOP_LEVEL else None


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


def check_config(
    config: ExperimentConfig,
    workspace: Workspace,
    *,
    build: bool = True,
    broken: frozenset[str] = frozenset(),
) -> list[ConfigProblem]:
    """Cross-field checks in ``workspace``. Returns every problem found (empty when the config can run).

    ``broken``: the sections that did not parse (:func:`parse_sections`); a check that reads one of
    them is skipped. ``build``: the data may be read and the model built (the memory checks), as far
    as the other problems allow (:func:`parse_config`)."""
    problems: list[ConfigProblem] = []
    m, d, t = config.model, config.data, config.training

    def reads(*sections: str) -> bool:
        return not broken.intersection(sections)

    def add(field: str, value: Any, message: str) -> None:
        problems.append(ConfigProblem(field, value, message))

    if reads("model", "training"):
        problems.extend(peft_problems(config))
    devices = config.network.num_clusters * config.network.devices_per_cluster
    if reads("network", "training") and devices * t.rounds > MAX_DEVICE_ROUNDS:
        add(
            "training.rounds",
            t.rounds,
            f"{devices} devices × {t.rounds} rounds = {devices * t.rounds} device records, more than "
            f"{MAX_DEVICE_ROUNDS:,}; run at most {MAX_DEVICE_ROUNDS // devices} rounds, or fewer devices",
        )
    if reads("data", "model"):
        problems.extend(_dataset_problems(config))
    refused_keys = hf_config_problems(m) if reads("model") else []
    problems.extend(refused_keys)
    if reads("model") and m.kind == "seq2seq" and m.num_decoder_layers < 1:
        add(
            "model.num_decoder_layers", m.num_decoder_layers, "a seq2seq model needs at least 1 decoder layer"
        )
    if reads("training", "scheduler", "data"):
        problems.extend(_micro_batch_problems(config))
    if reads("scheduler", "model", "network"):
        problems.extend(_check_policy(config, workspace))
    trace = pretrained = None
    try:
        trace = load_device_trace(config, workspace) if reads("network") else None
        pretrained = pretrained_dir(config, workspace) if reads("model") else None
    except FileRefused as err:
        add(err.field, err.value, err.message)
        build = build and err.field != PRETRAINED_FIELD
    fields = {problem.field for problem in problems}
    tokenizer_read = build or d.tokenizer.kind != "pretrained"  # a refused checkpoint's is not read
    if reads("data", "model", "network", EXPERIMENT) and "data.dataset" not in fields and tokenizer_read:
        # the model is built when every section parsed and nothing was found in what it is built from
        # but hf_config keys it refuses (it is built without them, as removing them would)
        blocking = {f for f in fields if f.startswith(("model.", "training.peft"))}
        blocking -= {problem.field for problem in refused_keys}
        build = build and not broken and not blocking
        if refused_keys:
            kept = {k: v for k, v in m.hf_config.items() if f"model.hf_config.{k}" not in fields}
            config = config.model_copy(update={"model": m.model_copy(update={"hf_config": kept})})
        memory = not fields.intersection(MICRO_BATCH_FIELDS)
        problems.extend(
            _check_data_and_memory(config, workspace, trace, pretrained, build=build, memory=memory)
        )
    return problems


def _dataset_problems(config: ExperimentConfig) -> list[ConfigProblem]:
    """``data.dataset`` a known dataset of the model's kind."""
    d, m = config.data, config.model
    if d.dataset not in DATASETS:
        known = ", ".join(DATASETS)
        return [ConfigProblem("data.dataset", d.dataset, f"unknown dataset; choose one of {known}")]
    if d.dataset in DATASET_KINDS and DATASET_KINDS[d.dataset] != m.kind:
        kind = DATASET_KINDS[d.dataset]
        same = [name for name, k in DATASET_KINDS.items() if k == m.kind] + [USER_FILES]
        return [
            ConfigProblem(
                "data.dataset",
                d.dataset,
                f"is a {kind} dataset but model.kind is {m.kind}; use one of {', '.join(same)} or set "
                f"model.kind: {kind}",
            )
        ]
    return []


MICRO_BATCH_FIELDS = frozenset(
    {
        "training.batch_size",
        "training.microbatch_size",
        "scheduler.num_microbatches",
        "scheduler.max_microbatches",
    }
)
"""The fields the memory checks' micro-batches are computed from: with a problem on one of them the
memory of the most favourable micro-batching would be about values the config cannot keep."""


def _micro_batch_problems(config: ExperimentConfig) -> list[ConfigProblem]:
    """The micro-batches against each other and against a cluster's data."""
    t, s, d = config.training, config.scheduler, config.data
    b = t.fixed_microbatch_size
    if t.batch_size is not None:
        return _batch_problems(config)
    if b is not None and b > d.samples_per_cluster:
        return [
            ConfigProblem(
                "training.microbatch_size",
                b,
                f"larger than a cluster's data (data.samples_per_cluster = {d.samples_per_cluster})",
            )
        ]
    if b is not None and s.num_microbatches * b > d.samples_per_cluster:
        return [
            ConfigProblem(
                "scheduler.num_microbatches",
                s.num_microbatches,
                f"M·b = {s.num_microbatches * b} exceeds a cluster's data "
                f"({d.samples_per_cluster} samples); lower M or the micro-batch size",
            )
        ]
    if s.num_microbatches > s.max_microbatches:
        return [
            ConfigProblem(
                "scheduler.num_microbatches",
                s.num_microbatches,
                f"exceeds scheduler.max_microbatches ({s.max_microbatches})",
            )
        ]
    return []


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
    config: ExperimentConfig,
    workspace: Workspace,
    trace: DeviceTrace | None,
    pretrained: Path | None,
    *,
    build: bool = True,
    memory: bool = True,
) -> list[ConfigProblem]:
    """The data read and counted against the config; then, with ``build`` and the data's vocabulary
    known, the model built (problems transformers finds) and, with ``memory``, its memory checked."""
    from collapipe_core.data import DataError, load_dataset, vocab_sizes

    try:
        capacity = data_capacity(config, workspace)
    except DataError as err:
        return [ConfigProblem(err.field, err.value, err.message)]
    except ValueError as err:
        return [ConfigProblem("data", config.data.dataset, str(err))]
    problems = capacity.problems(config)
    if not capacity.read:  # the files' rows are held out before their tokenizer is trained
        return problems
    try:
        if not problems and config.data.dataset in (USER_FILES, *DATASETS_CAUSAL_LM):
            load_dataset(config, workspace)  # the split: the files' every other check
        src_vocab, tgt_size = vocab_sizes(config, workspace)
    except DataError as err:
        return [*problems, ConfigProblem(err.field, err.value, err.message)]
    except ValueError as err:
        return [*problems, ConfigProblem("data", config.data.dataset, str(err))]
    if not build:
        return problems
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
    if not memory:
        return problems
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


def checked_data_capacity(data: Any, workspace: Workspace) -> DataCapacity:
    """:func:`data_capacity` of config ``data`` when what its data depend on parses (data, model,
    network and the top-level fields, a known dataset of the model's kind), whatever else the config
    gets wrong (data.samples_per_cluster above all): ConfigError naming what stops it otherwise."""
    from collapipe_core.data import DataError

    config, problems, broken = parse_sections(data)
    if config is None or broken & {"data", "model", "network", EXPERIMENT}:
        raise ConfigError(problems)
    problems = _dataset_problems(config)
    if problems:
        raise ConfigError(problems)
    config, _, _ = with_pretrained_sizes(config, workspace)  # the checkpoint's vocabulary, when it is read
    try:
        return data_capacity(config, workspace)
    except DataError as err:
        raise ConfigError([ConfigProblem(err.field, err.value, err.message)]) from None
    except ValueError as err:
        raise ConfigError([ConfigProblem("data", config.data.dataset, str(err))]) from None


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
