"""A config's checkpoint (``model.pretrained_path``) against the config: the sizes its config.json gives,
the architecture it holds, the positions it has, and the ``model.hf_config`` fields a family takes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from collapipe_core.config import ARCHITECTURE_KINDS, ExperimentConfig, ModelConfig
from collapipe_core.problems import ConfigProblem, translated
from collapipe_core.quote import short
from collapipe_core.state import PRETRAINED_FIELD, checkpoint_dir
from collapipe_core.workspace import FileRefused, Workspace

if TYPE_CHECKING:
    from collapipe_core.models.hf.pretrained import PretrainedSizes


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
) -> tuple[ExperimentConfig, list[ConfigProblem], bool]:
    """With ``model.pretrained_path``, the model's sizes are the checkpoint's: size fields the config
    leaves out take config.json's values; a size field the config sets must agree with it (a problem
    naming both otherwise), and the checkpoint's positions must hold seq_len (and bart's target_len).

    A checkpoint of another architecture is a problem on ``model.architecture``; when the two are the
    same kind of model (gpt2 and llama), the other checks go on with the checkpoint's architecture, so
    that what changing it brings up comes in the same answer. The third value says whether the model
    may be built: not after config.json was refused (a checkpoint whose sizes are refused is never
    built), nor for another kind of model or positions that do not hold seq_len."""
    m = config.model
    if m.pretrained_path is None:
        return config, [], True
    try:
        sizes = checkpoint_sizes(m.pretrained_path, workspace)
    except FileRefused as err:
        return config, [ConfigProblem(err.field, err.value, err.message)], False
    problems = []
    if sizes.architecture != m.architecture:
        name = short(m.pretrained_path)
        problems.append(
            ConfigProblem(
                "model.architecture",
                m.architecture,
                f"model.pretrained_path {name} holds a {sizes.architecture} model; set "
                f"model.architecture: {sizes.architecture}",
            )
        )
        if ARCHITECTURE_KINDS[sizes.architecture] != m.kind:
            return config, problems, False
        try:
            m = ModelConfig.model_validate(
                {**m.model_dump(exclude_unset=True, by_alias=True), "architecture": sizes.architecture}
            )
        except ValidationError as err:
            problems += [translated(e, prefix="model") for e in err.errors()]
            updates, conflicts, lengths = pretrained_size_problems(m, sizes)
            # the checks that follow read the checkpoint's architecture; the model is not built
            model = m.model_copy(update={"architecture": sizes.architecture, **updates})
            return config.model_copy(update={"model": model}), problems + conflicts + lengths, False
    updates, conflicts, lengths = pretrained_size_problems(m, sizes)
    model = m.model_copy(update=updates)
    return config.model_copy(update={"model": model}), problems + conflicts + lengths, not lengths


def checkpoint_sizes(name: str, workspace: Workspace) -> PretrainedSizes:
    """What the config.json of checkpoint ``name`` (a ``model.pretrained_path``) gives: read as JSON
    only, a regular file of at most 1 MiB inside the workspace, every size within the bounds of the
    config's own fields; FileRefused naming ``model.pretrained_path`` otherwise."""
    from collapipe_core.models.hf.pretrained import pretrained_sizes

    directory = checkpoint_dir(name, workspace)
    try:
        workspace.path(PRETRAINED_FIELD, f"{name.rstrip('/')}/config.json")  # not leaving the workspace
        return pretrained_sizes(directory, name)  # messages name the config's path
    except ValueError as err:
        raise FileRefused(PRETRAINED_FIELD, name, str(err)) from None


def pretrained_size_problems(
    m: ModelConfig, sizes: PretrainedSizes
) -> tuple[dict[str, int], list[ConfigProblem], list[ConfigProblem]]:
    """(the size fields config.json gives, the size fields set otherwise, the lengths its positions
    cannot hold) of model section ``m`` against checkpoint ``sizes``."""
    name = short(m.pretrained_path)
    conflicts, updates = [], {}
    for field in SIZE_FIELDS:
        theirs = getattr(sizes, field)
        if theirs is None:
            continue
        ours = getattr(m, field)
        if field in m.model_fields_set and ours is not None and ours != theirs:
            conflicts.append(
                ConfigProblem(
                    f"model.{field}",
                    ours,
                    f"conflicts with model.pretrained_path {name}, whose config.json gives {theirs}; "
                    f"remove model.{field} (it is read from the checkpoint) or set it to {theirs}",
                )
            )
        updates[field] = theirs
    lengths = []
    held = [("seq_len", m.seq_len)] + ([("target_len", m.target_len)] if m.kind == "seq2seq" else [])
    for field, length in held:
        if length > sizes.max_positions:
            lengths.append(
                ConfigProblem(
                    f"model.{field}",
                    length,
                    f"longer than the {sizes.max_positions} positions of model.pretrained_path {name}; "
                    f"use at most {sizes.max_positions}",
                )
            )
    return updates, conflicts, lengths


def hf_config_problems(m: ModelConfig) -> list[ConfigProblem]:
    """Each ``model.hf_config`` key the architecture's config class does not take, or that CollaPipe
    sets itself, as building the model would refuse it — every one, not only the first, and also when
    the model is not built."""
    if m.source != "transformers" or not m.hf_config:
        return []
    from collapipe_core.models.hf import family
    from collapipe_core.models.hf.common import BuildArgs

    fam = family(m.architecture)
    stand_in = BuildArgs(vocab_size=m.vocab_size or 256, num_outputs=2, pad_id=0)  # only keys are checked
    problems = []
    for key, value in m.hf_config.items():
        try:
            fam.config_kwargs(m.model_copy(update={"hf_config": {key: value}}), stand_in, pretrained=False)
        except ValueError as err:
            problems.append(ConfigProblem(f"model.hf_config.{key}", None, str(err)))
    return problems


def architecture_fields() -> dict[str, dict[str, Any]]:
    """Per Hugging Face architecture: the model kind it trains and the fields its config class takes
    (what ``model.hf_config`` may name, besides what CollaPipe sets itself)."""
    from collapipe_core.models.hf import FAMILIES, family

    return {
        name: {"kind": ARCHITECTURE_KINDS[name], "config_fields": sorted(family(name).config_fields())}
        for name in FAMILIES
    }
