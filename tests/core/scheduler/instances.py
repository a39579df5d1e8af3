"""Random small scheduling instances (seeded) for the scheduler tests."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel.problem import build_problem
from collapipe_core.decision import Decision
from collapipe_core.state import Environment, RoundState, build_environment, observe


def environment(**sections: Any) -> Environment:
    """An environment from config sections (plain dicts), with the scheduler tests' vocabulary sizes."""
    return build_environment(ExperimentConfig(**sections), src_vocab=40, tgt_size=45, trace=None)


def random_instance(seed: int) -> RoundState:
    """One round of a random small network: 1–2 clusters, ≤ 5 devices (≤ 3 with 2 clusters), ≤ 8 TEBs.

    Devices differ in speed, memory, distance and power; queues are random (some zero), some devices
    are unavailable, and memory binds for large segments or many micro-batches in some instances.
    """
    rng = np.random.default_rng([seed, 0x5EED])
    clusters = 1 if rng.random() < 0.75 else 2
    devices = int(rng.integers(1, 6 if clusters == 1 else 4))
    blocks = int(rng.integers(1, 9 if clusters == 1 else 6))
    d_model = int(rng.choice([16, 32, 64]))
    kind = str(rng.choice(["classifier", "seq2seq"]))
    seq_len = int(rng.choice([8, 16, 32]))
    microbatch = int(rng.choice([2, 4, 8, 16]))
    block_bytes = (
        4.0 * (4 * d_model**2 + 2 * d_model * 4 * d_model) * 4 + 4.0 * microbatch * seq_len * 15 * d_model
    )
    overhead = float(rng.choice([1.0, 16.0])) * 2**20
    env = environment(
        seed=int(rng.integers(0, 2**31)),
        network={
            "num_clusters": clusters,
            "devices_per_cluster": devices,
            "cpu_hz": {"low": 0.3e9, "high": 3.0e9},
            "memory_bytes": {
                "low": overhead + 1.5 * block_bytes,
                "high": overhead + float(rng.choice([4, 40])) * block_bytes,
            },
            "runtime_overhead_bytes": int(overhead),
            "distance_m": {"low": 5.0, "high": float(rng.choice([40, 200]))},
            "max_power_w": float(rng.uniform(0.05, 0.5)),
            "cu_flops_per_s": float(10 ** rng.uniform(9.5, 11)),
            "edge_flops_per_s": float(10 ** rng.uniform(10, 12)),
        },
        channel={"bandwidth_hz": float(10 ** rng.uniform(5.5, 7.3))},
        model={
            "kind": kind,
            "d_model": d_model,
            "num_heads": 4,
            "ffn_dim": 4 * d_model,
            "num_blocks": blocks,
            "seq_len": seq_len,
            "target_len": seq_len,
        },
        training={
            "microbatch_size": microbatch,
            "local_iterations": int(rng.integers(1, 4)),
        },
        data={"samples_per_cluster": 4096},
        scheduler={
            "V": float(10 ** rng.uniform(-1, 1)),
            "lambda": float(rng.uniform(0, 2)),
            "gradient_variance": float(rng.uniform(0, 2)),
            "num_microbatches": 1,
            "max_microbatches": int(rng.integers(1, 5)),
        },
    )
    shape = env.scenario.shape
    queues = 10 ** rng.uniform(-2, 2.5, shape) * (rng.random(shape) < 0.8)
    state = observe(env, int(rng.integers(0, 1000)), queues)
    available = rng.random(shape) < 0.85
    available[np.arange(shape[0]), rng.integers(0, shape[1], shape[0])] = True
    return dataclasses.replace(state, available=available)


def random_decision(state: RoundState, rng: np.random.Generator) -> Decision:
    """A random pipeline decision of ``state``: the TEBs spread at random over the available devices, random
    bandwidth shares and powers on the scheduled ones, a random M within the limit."""
    pr = build_problem(state)
    n, k = pr.shape
    delta = np.zeros((n, k), dtype=np.int64)
    for c in range(n):
        slots = np.flatnonzero(state.available[c])
        delta[c, slots] = rng.multinomial(pr.num_blocks, np.ones(slots.size) / slots.size)
    on = delta > 0
    beta = np.where(on, rng.dirichlet(np.ones(k), n), 0.0)
    beta = beta / beta.sum(axis=1, keepdims=True)
    power = np.where(on, rng.uniform(0.01, 1.0, (n, k)) * pr.max_power_w, 0.0)
    return Decision.from_arrays(delta, beta, power, rng.integers(1, pr.microbatch_limit + 1, n))


def random_round(seed: int, clusters: int, devices: int) -> RoundState:
    """One round of a random mid-size network of ``clusters`` × ``devices`` (6, 12 or 24 TEBs, M ≤ 16).

    Devices differ in speed, memory (binding in some instances), distance and power; queues are random
    (about a fifth zero) and about a tenth of the devices are unavailable (one per cluster stays)."""
    rng = np.random.default_rng([seed, clusters, devices, 0xD55DA])
    blocks = int(rng.choice([6, 12, 24]))
    d_model = int(rng.choice([32, 64, 128]))
    seq_len = int(rng.choice([16, 32, 64]))
    microbatch = int(rng.choice([2, 4, 8, 16]))
    block_bytes = 4.0 * (12 * d_model**2) * 4 + 4.0 * microbatch * seq_len * 15 * d_model
    overhead = 16.0 * 2**20
    env = environment(
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
            "max_microbatches": int(rng.choice([1, 4, 8, 16])),
        },
    )
    shape = env.scenario.shape
    queues = 10 ** rng.uniform(-2, 2.5, shape) * (rng.random(shape) < 0.8)
    state = observe(env, int(rng.integers(0, 1000)), queues)
    available = rng.random(shape) < 0.9
    available[np.arange(shape[0]), rng.integers(0, shape[1], shape[0])] = True
    return dataclasses.replace(state, available=available)
