"""Seeded instances of the scheduler's quality references (bench/scheduler_quality.py, test_quality.py).

Each generator maps a seed to one :class:`RoundState` with its own ``np.random.default_rng`` (no global
RNG): the same seed always rebuilds the same round, so the recorded references
(``data/quality_references.json``) keep only the generator's name and the seed.

- :func:`small_instance`: at most 8 devices in total and 12 TEBs, M_max ≤ 8, drawn so that ``optimal``
  (the exhaustive reference) has at most :data:`SMALL_CANDIDATES` candidates.
- :func:`medium_instance`: 12–50 devices in one of :data:`MEDIUM_SHAPES`, 8–24 TEBs, either devices
  drawn from ranges (as :func:`~tests.core.scheduler.instances.random_round`) or the device kinds and
  models of the paper examples (examples/paper-*.yaml) with perturbed sizes, channel, V, λ and queues.
- :func:`large_instance`: 100–1,000 devices in clusters of 5 (:data:`LARGE_SHAPES`), 12–48 TEBs, drawn
  as the medium ones.

Every round is GPipe (where ``evaluate()`` equals the solvers' closed-form objective), with random
queues (about a fifth zero), some devices unavailable (one per cluster always available) and, in some
rounds, slowed devices (speed factors below 1) and memory that binds.

:func:`rebuild` returns a recorded instance (checking its shape, TEBs, M_max and available devices
against the record) and :func:`scored` is the objective every reference and ratio uses.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from collapipe_core.costmodel import evaluate
from collapipe_core.decision import Decision
from collapipe_core.state import RoundState, observe
from tests.core.scheduler.instances import environment

REFERENCES = Path(__file__).parent / "data" / "quality_references.json"
"""The recorded references (bench/scheduler_quality.py ``record``)."""
SMALL_WORST = 1.01  # the bar: DSSDA ≤ 1.01 × optimal on every small instance
MEDIUM_GEOMEAN = 1.005  # and ≤ 1.005 × the recorded full-effort search on geometric mean over medium ones
MEDIUM_WORST = 1.02  # and ≤ 1.02 × on each (the same bars for the large instances)

SMALL_CANDIDATES = 420_000
"""Most candidates of ``optimal`` in a small instance: Π_n C(L + a_n − 1, a_n − 1)·M_max over the
clusters' available devices a_n, before its memory filter (8 devices × 12 TEBs × 8 is 403,200)."""

MEDIUM_SHAPES: tuple[tuple[int, int], ...] = (
    (3, 4),
    (4, 3),
    (2, 6),
    (2, 8),
    (3, 5),
    (4, 4),
    (4, 5),
    (5, 4),
    (3, 8),
    (4, 6),
    (5, 5),
    (3, 10),
    (4, 8),
    (8, 4),
    (6, 6),
    (5, 8),
    (4, 10),
    (8, 5),
    (5, 10),
    (10, 5),
)
"""(clusters, devices per cluster) of the medium instances: 12–50 devices."""

PAPER_PROFILES: tuple[dict[str, Any], ...] = (
    {
        "name": "flagship-phone",
        "cpu_hz": 2.8e9,
        "flops_per_cycle": 16,
        "memory_bytes": 4.0e9,
        "max_power_w": 0.2,
    },
    {
        "name": "midrange-phone",
        "cpu_hz": 2.0e9,
        "flops_per_cycle": 8,
        "memory_bytes": 2.0e9,
        "max_power_w": 0.2,
    },
    {
        "name": "budget-phone",
        "cpu_hz": 1.4e9,
        "flops_per_cycle": 8,
        "memory_bytes": 1.0e9,
        "max_power_w": 0.1,
    },
    {"name": "sbc-board", "cpu_hz": 1.5e9, "flops_per_cycle": 8, "memory_bytes": 2.0e9, "max_power_w": 0.1},
    {"name": "tablet", "cpu_hz": 2.4e9, "flops_per_cycle": 16, "memory_bytes": 3.0e9, "max_power_w": 0.2},
)
"""The device kinds of examples/paper-*.yaml; budgets and distances (there 30–90 m) are set per instance."""

PAPER_MODELS: tuple[dict[str, Any], ...] = (
    # BERT-base widths on language identification (examples/paper-bert.yaml)
    {
        "model": {"kind": "classifier", "d_model": 768, "num_heads": 12, "ffn_dim": 3072, "seq_len": 64},
        "microbatch_size": 8,
    },
    # Transformer-big widths on grapheme-to-phoneme (examples/paper-transformer.yaml)
    {
        "model": {
            "kind": "seq2seq",
            "d_model": 1024,
            "num_heads": 16,
            "ffn_dim": 4096,
            "num_decoder_layers": 6,
            "seq_len": 16,
            "target_len": 16,
        },
        "microbatch_size": 16,
    },
)


def small_instance(seed: int) -> RoundState:
    """One round of at most 8 devices (1 cluster of 1–8 or 2 clusters of 1–4), 1–12 TEBs, M_max 1–8.

    Shapes, TEBs, M_max and availability are redrawn (same generator) until ``optimal`` has at most
    :data:`SMALL_CANDIDATES` candidates, so every instance is one it solves."""
    rng = np.random.default_rng([seed, 0x5A11])
    while True:
        clusters = 1 if rng.random() < 0.6 else 2
        devices = int(rng.integers(1, 9 if clusters == 1 else 5))
        blocks = int(rng.integers(1, 13))
        max_micro = int(rng.integers(1, 9))
        available = _availability(rng, (clusters, devices), 0.85)
        if candidate_bound(available, blocks, max_micro) <= SMALL_CANDIDATES:
            break
    d_model = int(rng.choice([16, 32, 64]))
    seq_len = int(rng.choice([8, 16, 32]))
    microbatch = int(rng.choice([2, 4, 8, 16]))
    block_bytes = 4.0 * 12 * d_model**2 * 4 + 4.0 * microbatch * seq_len * 15 * d_model
    overhead = float(rng.choice([1.0, 16.0])) * 2**20
    env = environment(
        seed=int(rng.integers(0, 2**31)),
        network={
            "num_clusters": clusters,
            "devices_per_cluster": devices,
            "cpu_hz": {"low": 0.3e9, "high": 3.0e9},
            "memory_bytes": {
                "low": overhead + float(rng.choice([1.5, 3.0])) * block_bytes,
                "high": overhead + float(rng.choice([6, 16, 40])) * block_bytes,
            },
            "runtime_overhead_bytes": int(overhead),
            "distance_m": {"low": 5.0, "high": float(rng.choice([40, 200]))},
            "max_power_w": float(rng.uniform(0.05, 0.5)),
            "cu_flops_per_s": float(10 ** rng.uniform(9.5, 11)),
            "edge_flops_per_s": float(10 ** rng.uniform(10, 12)),
        },
        channel={"bandwidth_hz": float(10 ** rng.uniform(5.5, 7.3))},
        model={
            "kind": str(rng.choice(["classifier", "seq2seq"])),
            "d_model": d_model,
            "num_heads": 4,
            "ffn_dim": 4 * d_model,
            "num_blocks": blocks,
            "seq_len": seq_len,
            "target_len": seq_len,
        },
        training={"microbatch_size": microbatch, "local_iterations": int(rng.integers(1, 4))},
        data={"samples_per_cluster": 4096},
        scheduler={
            "V": float(10 ** rng.uniform(-1, 1)),
            "lambda": float(rng.uniform(0, 2)),
            "gradient_variance": float(rng.uniform(0, 2)),
            "num_microbatches": 1,
            "max_microbatches": max_micro,
        },
    )
    return _round(rng, env, available, queue_exponents=(-2.0, 2.5))


def small_fixed_batch_instance(seed: int) -> RoundState:
    """One round of :func:`small_instance`'s kind in the fixed-batch reading: a step's batch B of 4–48
    samples split into M micro-batches of B/M (M one of B's divisors up to M_max), every transfer paying a
    latency τ of 0–20 ms and every TEB's pass a fixed work Φ_0 of 0–20 MFLOP per micro-batch (its backward
    1 or 2 × that) — the per-micro-batch costs that give M an interior optimum. Redrawn until ``optimal``
    has at most :data:`SMALL_CANDIDATES` candidates."""
    rng = np.random.default_rng([seed, 0xF1B4])
    while True:
        clusters = 1 if rng.random() < 0.6 else 2
        devices = int(rng.integers(1, 9 if clusters == 1 else 5))
        blocks = int(rng.integers(1, 13))
        batch = int(rng.choice([4, 6, 8, 12, 16, 24, 32, 48]))
        max_micro = int(rng.integers(1, min(batch, 16) + 1))
        divisors = sum(1 for m in range(1, max_micro + 1) if batch % m == 0)
        available = _availability(rng, (clusters, devices), 0.85)
        if candidate_bound(available, blocks, divisors) <= SMALL_CANDIDATES:
            break
    d_model = int(rng.choice([16, 32, 64]))
    seq_len = int(rng.choice([8, 16, 32]))
    block_bytes = 4.0 * 12 * d_model**2 * 4 + 4.0 * batch * seq_len * 15 * d_model
    overhead = float(rng.choice([1.0, 16.0])) * 2**20
    overhead_flops = float(rng.choice([0.0, 2e6, 2e7]))
    env = environment(
        seed=int(rng.integers(0, 2**31)),
        network={
            "num_clusters": clusters,
            "devices_per_cluster": devices,
            "cpu_hz": {"low": 0.3e9, "high": 3.0e9},
            "memory_bytes": {
                "low": overhead + float(rng.choice([1.5, 3.0])) * block_bytes,
                "high": overhead + float(rng.choice([6, 16, 40])) * block_bytes,
            },
            "runtime_overhead_bytes": int(overhead),
            "distance_m": {"low": 5.0, "high": float(rng.choice([40, 200]))},
            "max_power_w": float(rng.uniform(0.05, 0.5)),
            "cu_flops_per_s": float(10 ** rng.uniform(9.5, 11)),
            "edge_flops_per_s": float(10 ** rng.uniform(10, 12)),
            "link_latency_s": float(rng.choice([0.0, 1e-3, 5e-3, 2e-2])),
            "block_overhead_flops": overhead_flops,
            "block_backward_overhead_flops": overhead_flops * float(rng.choice([1.0, 2.0])),
        },
        channel={"bandwidth_hz": float(10 ** rng.uniform(5.5, 7.3))},
        model={
            "kind": str(rng.choice(["classifier", "seq2seq"])),
            "d_model": d_model,
            "num_heads": 4,
            "ffn_dim": 4 * d_model,
            "num_blocks": blocks,
            "seq_len": seq_len,
            "target_len": seq_len,
        },
        training={
            "batch_size": batch,
            "local_iterations": int(rng.integers(1, 4)),
            "schedule": "gpipe",
        },
        data={"samples_per_cluster": 4096},
        scheduler={
            "V": float(10 ** rng.uniform(-1, 1)),
            "lambda": float(rng.uniform(0, 2)),
            "gradient_variance": float(rng.uniform(0, 2)),
            "num_microbatches": 1,
            "max_microbatches": max_micro,
        },
    )
    return _round(rng, env, available, queue_exponents=(-2.0, 2.5))


def medium_instance(seed: int) -> RoundState:
    """One round of 12–50 devices (a shape of :data:`MEDIUM_SHAPES`), 8, 12, 16 or 24 TEBs.

    Two in five are paper-like (:func:`_paper_environment`), the others drawn from ranges
    (:func:`_ranges_environment`)."""
    rng = np.random.default_rng([seed, 0x3ED1])
    clusters, devices = MEDIUM_SHAPES[int(rng.integers(len(MEDIUM_SHAPES)))]
    blocks = int(rng.choice([8, 12, 16, 24]))
    available = _availability(rng, (clusters, devices), 0.9)
    if rng.random() < 0.4:
        env = _paper_environment(rng, clusters, devices, blocks)
        queue_exponents = (-1.0, 2.5)  # the paper's rounds: Q·E reaches ~10³ J² at V = 100
    else:
        env = _ranges_environment(rng, clusters, devices, blocks)
        queue_exponents = (-2.0, 2.5)
    return _round(rng, env, available, queue_exponents)


LARGE_SHAPES: tuple[tuple[int, int], ...] = ((20, 5), (50, 5), (100, 5), (200, 5))
"""(clusters, devices per cluster) of the large instances: 100–1,000 devices."""


def large_instance(seed: int) -> RoundState:
    """One round of 100–1,000 devices (shape ``LARGE_SHAPES[seed % 4]``), 12, 24 or 48 TEBs; half of
    them paper-like, as :func:`medium_instance`."""
    rng = np.random.default_rng([seed, 0x1A26E])
    clusters, devices = LARGE_SHAPES[seed % len(LARGE_SHAPES)]
    blocks = int(rng.choice([12, 24, 48]))
    available = _availability(rng, (clusters, devices), 0.9)
    if rng.random() < 0.5:
        return _round(rng, _paper_environment(rng, clusters, devices, blocks), available, (-1.0, 2.5))
    return _round(rng, _ranges_environment(rng, clusters, devices, blocks), available, (-2.0, 2.5))


GENERATORS: dict[str, Callable[[int], RoundState]] = {
    "small": small_instance,
    "medium": medium_instance,
    "large": large_instance,
}
"""The generators by the name the recorded references carry."""


def load_references(path: Path = REFERENCES) -> dict[str, Any]:
    """The recorded references: per set (``small``, ``medium``) its generator and ``instances``."""
    return dict(json.loads(path.read_text()))


def describe(state: RoundState) -> dict[str, Any]:
    """What a record keeps of its instance besides the seed, to catch a generator that has changed."""
    return {
        "shape": list(state.scenario.shape),
        "blocks": state.profile.num_blocks,
        "max_micro": state.settings.max_microbatches,
        "available": int(state.available.sum()),
    }


def rebuild(generator: str, entry: dict[str, Any]) -> RoundState:
    """The recorded instance ``entry`` of ``generator``, checked against what the record kept of it."""
    state = GENERATORS[generator](entry["seed"])
    got = describe(state)
    kept = {key: entry[key] for key in got}
    if got != kept:
        raise AssertionError(f"{generator} seed {entry['seed']} rebuilds as {got}, recorded {kept}")
    return state


def scored(state: RoundState, decision: Decision) -> float:
    """The objective every reference and ratio uses: ``evaluate()``'s, of a decision that must be feasible."""
    ev = evaluate(state, decision)
    if not ev.feasible:
        raise AssertionError(f"infeasible decision: {ev.violations}")
    return float(ev.objective)


def candidate_bound(available: np.ndarray, blocks: int, max_micro: int) -> int:
    """``optimal``'s candidates before its memory filter: Π_n C(L + a_n − 1, a_n − 1)·M_max."""
    return math.prod(
        math.comb(blocks + int(a) - 1, int(a) - 1) * max_micro for a in np.sum(available, axis=1)
    )


def _availability(rng: np.random.Generator, shape: tuple[int, int], p: float) -> np.ndarray:
    available = rng.random(shape) < p
    available[np.arange(shape[0]), rng.integers(0, shape[1], shape[0])] = True
    return available


def _round(
    rng: np.random.Generator, env: Any, available: np.ndarray, queue_exponents: tuple[float, float]
) -> RoundState:
    """The round: random queues (about a fifth zero), fading round, availability, and in about a third
    of the rounds speed factors in [0.3, 1] (stragglers)."""
    shape = env.scenario.shape
    queues = 10 ** rng.uniform(*queue_exponents, shape) * (rng.random(shape) < 0.8)
    state = observe(env, int(rng.integers(0, 1000)), queues)
    speed = rng.uniform(0.3, 1.0, shape) if rng.random() < 0.3 else np.ones(shape)
    return dataclasses.replace(state, available=available, speed_factor=speed)


def _ranges_environment(rng: np.random.Generator, clusters: int, devices: int, blocks: int) -> Any:
    """Devices drawn from ranges, small models (d 32–128): random_round's population at 8–24 TEBs."""
    d_model = int(rng.choice([32, 64, 128]))
    seq_len = int(rng.choice([16, 32, 64]))
    microbatch = int(rng.choice([2, 4, 8, 16]))
    block_bytes = 4.0 * 12 * d_model**2 * 4 + 4.0 * microbatch * seq_len * 15 * d_model
    overhead = 16.0 * 2**20
    return environment(
        seed=int(rng.integers(0, 2**31)),
        network={
            "num_clusters": clusters,
            "devices_per_cluster": devices,
            "cpu_hz": {"low": 0.3e9, "high": 3.0e9},
            "memory_bytes": {
                "low": overhead + float(rng.choice([2, 4])) * block_bytes,
                "high": overhead + float(rng.choice([8, 60])) * block_bytes,
            },
            "runtime_overhead_bytes": int(overhead),
            "distance_m": {"low": 5.0, "high": float(rng.choice([40, 200]))},
            "max_power_w": float(rng.uniform(0.05, 0.5)),
            "cu_flops_per_s": float(10 ** rng.uniform(9.5, 11)),
            "edge_flops_per_s": float(10 ** rng.uniform(10, 12)),
        },
        channel={"bandwidth_hz": float(10 ** rng.uniform(5.5, 7.3))},
        model={
            "kind": str(rng.choice(["classifier", "seq2seq"])),
            "d_model": d_model,
            "num_heads": 4,
            "ffn_dim": 4 * d_model,
            "num_blocks": blocks,
            "seq_len": seq_len,
            "target_len": seq_len,
        },
        training={"microbatch_size": microbatch, "local_iterations": int(rng.integers(1, 4))},
        data={"samples_per_cluster": 4096},
        scheduler={
            "V": float(10 ** rng.uniform(-1, 1)),
            "lambda": float(rng.uniform(0, 2)),
            "gradient_variance": float(rng.uniform(0, 2)),
            "num_microbatches": 1,
            "max_microbatches": int(rng.choice([2, 4, 8, 16])),
        },
    )


def _paper_environment(rng: np.random.Generator, clusters: int, devices: int, blocks: int) -> Any:
    """The paper examples' device kinds (in a random cyclic order, memory and distance scaled per kind),
    network and one of their two models at ``blocks`` TEBs; channel width, V, λ, σ², M_max and local
    iterations around the examples' values."""
    order = rng.permutation(len(PAPER_PROFILES))
    memory_scale = float(rng.choice([0.5, 1.0, 2.0]))
    profiles = [
        {
            **PAPER_PROFILES[i],
            "memory_bytes": int(PAPER_PROFILES[i]["memory_bytes"] * memory_scale),
            "energy_budget_j": 20.0,
            "distance_m": float(rng.uniform(10.0, 100.0)),
        }
        for i in order
    ]
    model = PAPER_MODELS[int(rng.integers(len(PAPER_MODELS)))]
    return environment(
        seed=int(rng.integers(0, 2**31)),
        network={
            "num_clusters": clusters,
            "devices_per_cluster": devices,
            "profiles": profiles,
            "cu_flops_per_s": 5.0e10,
            "edge_flops_per_s": 4.0e12,
            "cu_link_rate_bps": 2.0e8,
            "edge_downlink_rate_bps": 5.0e8,
            "cu_uplink_rate_bps": 1.0e9,
            "runtime_overhead_bytes": 100_000_000,
        },
        channel={"bandwidth_hz": float(80e6 * 2 ** rng.uniform(-2, 1))},
        model={**model["model"], "num_blocks": blocks},
        training={
            "microbatch_size": model["microbatch_size"],
            "local_iterations": int(rng.integers(1, 4)),
            "optimizer": "adamw",
        },
        data={"samples_per_cluster": 4096},
        scheduler={
            "V": float(10 ** rng.uniform(1, 3)),
            "lambda": float(rng.uniform(0, 2)),
            "gradient_variance": float(10 ** rng.uniform(3, 4.5)),
            "num_microbatches": 1,
            "max_microbatches": int(rng.choice([4, 8, 16])),
        },
    )


def small_recompute_instance(seed: int) -> RoundState:
    """One round of :func:`small_fixed_batch_instance`'s kind under ``training.activation_checkpointing:
    auto`` (each device may recompute its TEBs' activations), with long sequences over narrow blocks so that
    what a micro-batch keeps for backward is a large part of a device's memory, and memories drawn around
    it: some placements fit only where devices recompute. Redrawn until ``optimal`` has at most
    :data:`SMALL_CANDIDATES` candidates."""
    rng = np.random.default_rng([seed, 0x5EC0])
    while True:
        clusters = 1 if rng.random() < 0.6 else 2
        devices = int(rng.integers(2, 7 if clusters == 1 else 5))
        blocks = int(rng.integers(2, 11))
        batch = int(rng.choice([4, 8, 12, 16, 24, 32]))
        max_micro = int(rng.integers(1, min(batch, 8) + 1))
        divisors = sum(1 for m in range(1, max_micro + 1) if batch % m == 0)
        available = _availability(rng, (clusters, devices), 0.85)
        if candidate_bound(available, blocks, divisors) <= SMALL_CANDIDATES:
            break
    d_model = int(rng.choice([16, 32]))
    seq_len = int(rng.choice([64, 128]))
    state_bytes = 4.0 * 12 * d_model**2 * 4  # AdamW: weights, gradients and two moments
    kept = 4.0 * batch * seq_len * 15 * d_model  # about what one TEB keeps for a whole batch
    overhead = 2.0**20
    overhead_flops = float(rng.choice([0.0, 2e6, 2e7]))
    env = environment(
        seed=int(rng.integers(0, 2**31)),
        network={
            "num_clusters": clusters,
            "devices_per_cluster": devices,
            "cpu_hz": {"low": 0.3e9, "high": 3.0e9},
            "memory_bytes": {
                "low": overhead + float(rng.choice([0.5, 1.0, 2.0])) * (state_bytes + kept),
                "high": overhead + float(rng.choice([2.0, 4.0, 8.0, 16.0])) * (state_bytes + kept),
            },
            "runtime_overhead_bytes": int(overhead),
            "distance_m": {"low": 5.0, "high": float(rng.choice([40, 200]))},
            "max_power_w": float(rng.uniform(0.05, 0.5)),
            "cu_flops_per_s": float(10 ** rng.uniform(9.5, 11)),
            "edge_flops_per_s": float(10 ** rng.uniform(10, 12)),
            "link_latency_s": float(rng.choice([0.0, 1e-3, 5e-3])),
            "block_overhead_flops": overhead_flops,
            "block_backward_overhead_flops": overhead_flops * float(rng.choice([1.0, 2.0])),
        },
        channel={"bandwidth_hz": float(10 ** rng.uniform(5.5, 7.3))},
        model={
            "kind": "classifier",
            "d_model": d_model,
            "num_heads": 4,
            "ffn_dim": 4 * d_model,
            "num_blocks": blocks,
            "seq_len": seq_len,
        },
        training={
            "batch_size": batch,
            "local_iterations": int(rng.integers(1, 4)),
            "schedule": "gpipe",
            "activation_checkpointing": "auto",
        },
        data={"samples_per_cluster": 4096},
        scheduler={
            "V": float(10 ** rng.uniform(-1, 1)),
            "lambda": float(rng.uniform(0, 2)),
            "gradient_variance": float(rng.uniform(0, 2)),
            "num_microbatches": 1,
            "max_microbatches": max_micro,
        },
    )
    return _round(rng, env, available, queue_exponents=(-2.0, 2.5))
