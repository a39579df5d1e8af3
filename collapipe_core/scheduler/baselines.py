"""Rule-based baselines. Each sees the same RoundState as DSSDA and returns a full Decision."""

from __future__ import annotations

import numpy as np

from collapipe_core.costmodel.problem import RoundProblem, build_problem
from collapipe_core.costmodel.replicated import replicated_memory_bytes, step_samples
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.arrays import IntArray
from collapipe_core.scheduler.base import register
from collapipe_core.state import RoundState


def equal_split(num_blocks: int, available: np.ndarray) -> np.ndarray:
    """δ per device: num_blocks spread as evenly as possible over the available devices, in order (the
    first ones take the remainder)."""
    return proportional_split(num_blocks, available.astype(np.float64), np.full(available.shape, num_blocks))


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
    """Equal TEBs over the available devices (the first ones take the remainder), equal
    bandwidth over the scheduled devices, maximum power, the configured fixed M."""

    name = "uniform"

    def decide(self, state: RoundState) -> Decision:
        blocks = state.profile.num_blocks
        delta = np.stack([equal_split(blocks, row) for row in state.available])
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, fixed_microbatches(state))


@register("fixed")
class Fixed:
    """The user's own segment vector ``scheduler.segments``; otherwise as ``uniform``."""

    name = "fixed"

    def decide(self, state: RoundState) -> Decision:
        segments = state.settings.segments
        if segments is None:
            raise ValueError("policy 'fixed' needs scheduler.segments (TEBs per device)")
        delta = np.tile(np.asarray(segments, dtype=np.int64), (state.scenario.num_clusters, 1))
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, fixed_microbatches(state))


def _fit_micro(pr: RoundProblem, micro: IntArray | int) -> IntArray:
    """Per cluster the M nearest ``micro`` (N,) at which the available devices' memory holds the encoder:
    with a fixed micro-batch the largest M ≤ ``micro`` (1 if none fits: memory grows with M); with a fixed
    batch the smallest choice ≥ ``micro`` (smaller micro-batches need less), else the largest below it, else
    ``micro`` itself."""
    want = np.broadcast_to(np.asarray(micro, dtype=np.int64), (pr.shape[0],))
    m = pr.microbatch_choices[:, None]  # (C, 1)
    fits = pr.memory_caps(m).sum(axis=2) >= pr.num_blocks  # (C, N)
    below = np.max(np.where(fits & (m <= want), m, 0), axis=0)
    if pr.batch_size is None:
        out: IntArray = np.maximum(below, 1)
        return out
    above = np.min(np.where(fits & (m >= want), m, np.iinfo(np.int64).max), axis=0)
    chosen = np.where(above < np.iinfo(np.int64).max, above, np.where(below > 0, below, want))
    return np.asarray(chosen, dtype=np.int64)


def proportional_split(num_blocks: int, weight: FloatArray, caps: IntArray) -> IntArray:
    """δ ∝ weight (largest remainder), then capped, the excess re-split in proportion among the rest."""
    delta = np.zeros(weight.shape, dtype=np.int64)
    left, room = num_blocks, caps.astype(np.int64).copy()
    while left > 0 and np.any((room > 0) & (weight > 0)):
        w = np.where(room > 0, weight, 0.0)
        target = left * w / w.sum()
        take = np.floor(target).astype(np.int64)
        order = np.argsort(-(target - take), kind="stable")
        take[order[: left - int(take.sum())]] += 1
        take = np.minimum(take, room)
        if take.sum() == 0:  # every share rounded to zero: one TEB to the heaviest device with room
            take[int(np.argmax(w))] = 1
        delta += take
        room -= take
        left -= int(take.sum())
    return delta


@register("proportional")
class Proportional:
    """TEBs ∝ device speed F_k·speed_k over the available devices (largest-remainder
    rounding, then capped by memory with the excess passed on in proportion), equal bandwidth over the
    scheduled devices, maximum power, the configured M (lowered until the placement fits, if it must)."""

    name = "proportional"

    def decide(self, state: RoundState) -> Decision:
        pr = build_problem(state)
        micro = _fit_micro(pr, fixed_microbatches(state))
        caps = pr.memory_caps(micro)
        speed = np.where(pr.available, state.scenario.flops_per_s * state.speed_factor, 0.0)
        delta = np.stack([proportional_split(pr.num_blocks, speed[n], caps[n]) for n in range(pr.shape[0])])
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, micro)


@register("random")
class RandomPolicy:
    """Per cluster a random M, random contiguous segments over the available devices (within
    memory), Dirichlet bandwidth shares and powers uniform in (0.1, 1]·p_max — from a generator seeded
    by (seed, round), so the same round always gets the same decision."""

    name = "random"

    def decide(self, state: RoundState) -> Decision:
        pr = build_problem(state)
        rng = np.random.default_rng([state.settings.seed, 0x7A4D0, state.round_index])
        n, k = pr.shape
        micro = _fit_micro(pr, pr.microbatch_choices[rng.integers(0, pr.microbatch_choices.size, n)])
        caps = pr.memory_caps(micro)
        delta = np.zeros(pr.shape, dtype=np.int64)
        for c in range(n):
            weight = np.where(pr.available[c], rng.dirichlet(np.ones(k)), 0.0)
            delta[c] = proportional_split(pr.num_blocks, weight + 1e-12 * pr.available[c], caps[c])
        on = delta > 0
        beta = np.where(on, rng.dirichlet(np.ones(k), n), 0.0)
        beta = beta / np.maximum(beta.sum(axis=1, keepdims=True), 1e-300)
        power = np.where(on, rng.uniform(0.1, 1.0, (n, k)) * pr.max_power_w, 0.0)
        return Decision.from_arrays(delta, beta, power, micro)


@register("fl")
class FederatedLearning:
    """Federated learning without a pipeline (decision mode "replicated", evaluated by
    :mod:`collapipe_core.costmodel.replicated`): every available device whose memory holds the whole
    encoder and its share of the batch trains all L TEBs; equal bandwidth, maximum power, the configured M."""

    name = "fl"

    def decide(self, state: RoundState) -> Decision:
        pr = build_problem(state)
        micro = fixed_microbatches(state)
        batch = float(step_samples(pr, micro))
        # the most devices m such that the m with the most memory each hold the encoder and a batch share
        part = np.zeros(pr.shape, dtype=bool)
        for c in range(pr.shape[0]):
            order = [int(k) for k in np.argsort(-pr.memory_bytes[c], kind="stable") if pr.available[c, k]]
            for m in range(len(order), 0, -1):
                need = np.broadcast_to(replicated_memory_bytes(pr, batch / m), pr.shape)[c, order[m - 1]]
                if need <= pr.memory_bytes[c, order[m - 1]]:
                    part[c, order[:m]] = True
                    break
            if not part[c].any() and order:  # nobody fits: the largest memory (shown as a violation)
                part[c, order[0]] = True
        delta = np.where(part, pr.num_blocks, 0)
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, micro, mode="replicated")


@register("split")
class Split:
    """One device per cluster — the fastest whose memory holds the whole encoder at M = 1 —
    trains all L TEBs with the whole band at maximum power; M = 1."""

    name = "split"

    def decide(self, state: RoundState) -> Decision:
        pr = build_problem(state)
        caps = pr.memory_caps(np.ones(pr.shape[0]))
        speed = state.scenario.flops_per_s * state.speed_factor
        delta = np.zeros(pr.shape, dtype=np.int64)
        for c in range(pr.shape[0]):
            fits = pr.available[c] & (caps[c] >= pr.num_blocks)
            pool = fits if fits.any() else pr.available[c]
            delta[c, int(np.argmax(np.where(pool, speed[c], -1.0)))] = pr.num_blocks
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, 1)
