"""Validate a user's experiment config at the edge: the core's parse_config, errors as 422 details; and
what the form asks about a config besides: its data's size, a checkpoint's sizes, the families' fields."""

from __future__ import annotations

import dataclasses
from typing import Any

from backend.errors import InvalidConfig, InvalidInput
from backend.text_input import nul_paths
from collapipe_core.checkpoint_checks import architecture_fields, checkpoint_sizes
from collapipe_core.config import ExperimentConfig
from collapipe_core.quote import short
from collapipe_core.validation import ConfigError, checked_data_capacity, parse_config
from collapipe_core.workspace import FileRefused, Workspace

__all__ = ["architecture_fields", "checkpoint", "dataset_capacity", "normalized", "validated_config"]


def validated_config(data: dict[str, Any], workspace: Workspace, field: str = "config") -> ExperimentConfig:
    """Parse and check ``data`` in the service's ``workspace`` (files from the data directory,
    registered policies, the worker's memory); raises InvalidConfig whose details name ``<field>.<path>``."""
    _refuse_nul(data, field)
    try:
        return parse_config(data, workspace)
    except ConfigError as err:
        raise InvalidConfig.from_config_error(err, prefix=field) from None


def dataset_capacity(data: dict[str, Any], workspace: Workspace, field: str = "config") -> dict[str, Any]:
    """What the data of config ``data`` hold (``source``, ``unit``, ``train``, ``held_out``) and the
    largest ``data.samples_per_cluster`` and ``data.eval_samples`` they allow; InvalidConfig when the
    data cannot be read (the config's other problems do not stop it)."""
    _refuse_nul(data, field)
    try:
        capacity = checked_data_capacity(data, workspace)
    except ConfigError as err:
        raise InvalidConfig.from_config_error(err, prefix=field) from None
    answer = capacity.to_json()
    del answer["read"]
    return answer


def checkpoint(name: str, workspace: Workspace, field: str = "query.path") -> dict[str, Any]:
    """The architecture and sizes the config.json of checkpoint ``name`` gives (read as a check reads
    it: JSON only, at most 1 MiB, inside the data directory); InvalidInput naming ``field`` otherwise."""
    try:
        sizes = checkpoint_sizes(name, workspace)
    except FileRefused as err:
        detail = {"field": field, "value": short(name), "message": err.message}
        raise InvalidInput(f"{field}: {err.message}", [detail]) from None
    return dataclasses.asdict(sizes)


def _refuse_nul(data: dict[str, Any], field: str) -> None:
    bad = nul_paths(data)
    if bad:
        details = [
            {"field": f"{field}.{p}", "value": None, "message": "must not contain NUL characters"}
            for p in bad
        ]
        raise InvalidConfig(f"the experiment config has {len(details)} problem(s)", details)


def normalized(config: ExperimentConfig) -> dict[str, Any]:
    """The stored form: every field explicit, so a later change of defaults cannot change a run."""
    return config.model_dump(mode="json", by_alias=True)
