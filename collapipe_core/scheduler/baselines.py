"""Rule-based baselines. Each sees the same RoundState as DSSDA and returns a full Decision.

- ``uniform``: equal TEBs over the available devices (the first ones take the remainder), equal
  bandwidth over the scheduled devices, maximum power, the configured fixed M.
- ``fixed``: the user's own segment vector ``scheduler.segments``; otherwise as ``uniform``.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.base import register
from collapipe_core.state import RoundState


def equal_split(num_blocks: int, available: np.ndarray) -> np.ndarray:
    """δ per device: num_blocks spread as evenly as possible over the available devices, in order."""
    delta = np.zeros(available.shape, dtype=np.int64)
    slots = np.flatnonzero(available)
    if slots.size == 0:
        return delta
    slots = slots[: min(slots.size, num_blocks)]
    base, extra = divmod(num_blocks, slots.size)
    delta[slots] = base
    delta[slots[:extra]] += 1
    return delta


def equal_bandwidth_max_power(state: RoundState, delta: np.ndarray) -> tuple[FloatArray, FloatArray]:
    """β = 1/(scheduled devices) and p = p_max on scheduled devices; zero elsewhere."""
    scheduled = delta > 0
    count = np.maximum(scheduled.sum(axis=1, keepdims=True), 1)
    beta = np.where(scheduled, 1.0 / count, 0.0)
    power = np.where(scheduled, state.scenario.max_power_w, 0.0)
    return beta, power


def fixed_microbatches(state: RoundState) -> int:
    return min(state.settings.num_microbatches, state.settings.microbatch_limit)


@register("uniform")
class Uniform:
    name = "uniform"

    def decide(self, state: RoundState) -> Decision:
        blocks = state.profile.num_blocks
        delta = np.stack([equal_split(blocks, row) for row in state.available])
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, fixed_microbatches(state))


@register("fixed")
class Fixed:
    name = "fixed"

    def decide(self, state: RoundState) -> Decision:
        segments = state.settings.segments
        if segments is None:
            raise ValueError("policy 'fixed' needs scheduler.segments (TEBs per device)")
        delta = np.tile(np.asarray(segments, dtype=np.int64), (state.scenario.num_clusters, 1))
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, fixed_microbatches(state))
