"""A run as config segments: forks switch config (policy, V) at a round; replay reproduces the rest.

A run's ``replay_configs`` ([{"until_round": k, "config": {...}}, ...], oldest first) are the configs
that produced its rounds before each switch; ``config`` runs from the last switch to the end. Every
draw in the core derives from the seed and the round index, so running segment configs one after the
other reproduces the parent's state at the fork round exactly, then continues with the new config.

At a switch the checkpoint (written under the previous segment's config) is read re-labelled with the
next config's fingerprint (``relabelled``): the fingerprint guards against resuming with a different
model or data, and a policy/V switch changes neither the weights nor the optimizer state it carries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collapipe_core.checkpoint import config_fingerprint
from collapipe_core.config import ExperimentConfig


@dataclass(frozen=True)
class Segment:
    config: ExperimentConfig
    start_round: int
    end_round: int  # exclusive


ConfigParser = Callable[[dict[str, Any]], ExperimentConfig]


def plan_segments(
    config: dict[str, Any], replay_configs: list[dict[str, Any]], total_rounds: int, parse: ConfigParser
) -> list[Segment]:
    """The run's segments; ``parse`` reads each stored config (a worker checks it again in its own
    workspace, so a policy or file missing there fails the run; a reader of stored rounds only parses)."""
    segments = []
    start = 0
    for entry in replay_configs:
        end = int(entry["until_round"])
        if end > start:
            segments.append(Segment(parse(entry["config"]), start, end))
        start = max(start, end)
    segments.append(Segment(parse(config), start, total_rounds))
    return segments


def config_at(segments: list[Segment], round_index: int) -> ExperimentConfig:
    """The config that produced (or produces) round ``round_index``."""
    for segment in segments:
        if round_index < segment.end_round:
            return segment.config
    return segments[-1].config


def relabelled(payload: dict[str, Any], segment: Segment) -> dict[str, Any]:
    """A checkpoint taken exactly at ``segment.start_round``, resumable under the segment's config
    (unchanged when it already is); ValueError for a checkpoint of another config at another round."""
    fingerprint = config_fingerprint(segment.config)
    if payload["config_fingerprint"] == fingerprint:
        return payload
    if int(payload["next_round"]) != segment.start_round:
        raise ValueError(
            f"checkpoint at round {payload['next_round']} belongs to another config than the segment "
            f"starting at round {segment.start_round}"
        )
    return {**payload, "config_fingerprint": fingerprint}
