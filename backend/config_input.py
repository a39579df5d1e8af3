"""Validate a user's experiment config at the edge: the core's parse_config, errors as 422 details."""

from __future__ import annotations

from typing import Any

from backend.errors import InvalidConfig
from backend.text_input import nul_paths
from collapipe_core.config import ExperimentConfig
from collapipe_core.validation import ConfigError, parse_config
from collapipe_core.workspace import Workspace


def validated_config(data: dict[str, Any], workspace: Workspace, field: str = "config") -> ExperimentConfig:
    """Parse and check ``data`` in the service's ``workspace`` (files from the data directory,
    registered policies, the worker's memory); raises InvalidConfig whose details name ``<field>.<path>``."""
    bad = nul_paths(data)
    if bad:
        details = [
            {"field": f"{field}.{p}", "value": None, "message": "must not contain NUL characters"}
            for p in bad
        ]
        raise InvalidConfig(f"the experiment config has {len(details)} problem(s)", details)
    try:
        return parse_config(data, workspace)
    except ConfigError as err:
        raise InvalidConfig.from_config_error(err, prefix=field) from None


def normalized(config: ExperimentConfig) -> dict[str, Any]:
    """The stored form: every field explicit, so a later change of defaults cannot change a run."""
    return config.model_dump(mode="json", by_alias=True)
