"""The public scripting API: load a config, observe a round, decide with any policy, evaluate.

    from collapipe_core import api
    config = api.load_config("examples/quickstart.yaml")
    state = api.round_state(config, round_index=0)
    decision = api.decide("uniform", state)          # or "mypkg.mod:MyPolicy"
    report = api.evaluate(state, decision)           # objective, latency_s, energy_j{device: J}, ...
    after = api.round_state(config, 1, previous=api.placement(state, decision))  # round 1 after it

Decisions serialise with ``decision.to_json()`` / ``Decision.from_json(...)``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from collapipe_core import costmodel
from collapipe_core.config import ExperimentConfig
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray
from collapipe_core.scheduler import get_policy
from collapipe_core.state import (
    Environment,
    Placement,
    RoundState,
    build_environment,
    load_device_trace,
    observe,
    pretrained_dir,
    update_queues,
)
from collapipe_core.validation import load_config
from collapipe_core.workspace import Workspace

__all__ = [
    "Decision",
    "Placement",
    "decide",
    "environment",
    "evaluate",
    "load_config",
    "memory_report",
    "placement",
    "round_state",
    "schedule_rounds",
]


def environment(config: ExperimentConfig) -> Environment:
    """The static context of a run (devices, model costs, trace) — build once, observe many rounds."""
    from collapipe_core.data import vocab_sizes

    local = Workspace.local()
    src_vocab, tgt_size = vocab_sizes(config, local)
    return build_environment(
        config, src_vocab, tgt_size, load_device_trace(config, local), pretrained_dir(config, local)
    )


def round_state(
    config: ExperimentConfig | Environment,
    round_index: int,
    queues: FloatArray | None = None,
    previous: Placement | None = None,
) -> RoundState:
    """What every policy observes in round ``round_index`` (channel, availability, queues Q_k, and the
    ``previous`` round's placement: None for a first round, in which no block changes device)."""
    env = config if isinstance(config, Environment) else environment(config)
    return observe(env, round_index, queues, previous)


def placement(state: RoundState, decision: Decision) -> Placement:
    """The placement ``decision`` leaves after round ``state`` (segments, modeled rates, powers): the
    next round's ``previous``."""
    return Placement.of(decision, costmodel.evaluate(state, decision).rate_bps)


def decide(policy_name: str, state: RoundState) -> Decision:
    return get_policy(policy_name).decide(state)


def evaluate(state: RoundState, decision: Decision) -> dict[str, Any]:
    """Modeled objective, latency, per-device energy and memory, feasibility and violations (plain JSON)."""
    return _report(costmodel.evaluate(state, decision), state.scenario.device_ids())


def memory_report(state: RoundState, decision: Decision) -> dict[str, Any]:
    """The model's parameters (trainable and frozen) and each scheduled device's modeled memory by part
    (weights, gradients, optimizer state, activations, runtime; bytes) under ``decision``: what the
    pre-flight shows beside round 0."""
    from collapipe_core.costmodel.evaluate import memory_parts

    prof = state.profile
    ev = costmodel.evaluate(state, decision)
    parts = memory_parts(state, decision, ev)
    on = decision.num_blocks() > 0
    devices = {
        device_id: {name: float(part[n, k]) for name, part in parts.items()}
        for device_id, (n, k) in zip(state.scenario.device_ids(), np.ndindex(on.shape), strict=True)
        if on[n, k]
    }
    return {
        "model": {
            "params": prof.total_params,
            "trainable_params": prof.trainable_params,
            "frozen_params": prof.total_params - prof.trainable_params,
            "precision": prof.precision,
            "recomputing_devices": int(decision.recompute().sum())
            if state.settings.checkpointing == "auto"
            else int(on.sum()) * (state.settings.checkpointing == "all"),
        },
        "memory_parts": devices,
    }


def _report(ev: costmodel.Evaluation, ids: list[str]) -> dict[str, Any]:
    return {
        "objective": ev.objective,
        "objective_terms": {
            "latency": ev.objective_latency,
            "convergence": ev.objective_convergence,
            "queue_energy": ev.objective_energy,
        },
        "latency_s": ev.latency_s,
        "redistribution_s": ev.redistribution_s.tolist(),
        "blocks_moved": int(ev.blocks_moved.sum()),
        "moves_latency_s": ev.moves_latency_s,
        "energy_j": dict(zip(ids, ev.energy_j.ravel().tolist(), strict=True)),
        "memory_bytes": dict(zip(ids, ev.memory_bytes.ravel().tolist(), strict=True)),
        "feasible": ev.feasible,
        "violations": list(ev.violations),
    }


def schedule_rounds(
    config: ExperimentConfig, rounds: int, previous: Placement | None = None
) -> list[dict[str, Any]]:
    """Run the configured policy for ``rounds`` rounds on the modeled network, no training: the queues
    evolve and each round starts from the placement the one before left (``previous`` for the first:
    None, no block moves).

    One dict per round: round, policy, objective, latency_s, redistribution_s (per cluster),
    blocks_moved, moves_latency_s, energy_j, queues, memory_bytes (device id → value), decision,
    solve_time_s, solver_iterations, objective_terms, feasible, violations.
    """
    env = environment(config)
    policy = get_policy(config.scheduler.policy)
    queues = np.zeros(env.scenario.shape)
    ids = env.scenario.device_ids()
    rows = []
    for t in range(rounds):
        state = observe(env, t, queues, previous)
        started = time.perf_counter()
        decision = policy.decide(state)
        solve_time = time.perf_counter() - started
        ev = costmodel.evaluate(state, decision)
        rows.append(
            {
                "round": t,
                "policy": policy.name,
                **_report(ev, ids),
                "queues": dict(zip(ids, queues.ravel().tolist(), strict=True)),
                "decision": decision.to_json(),
                "solve_time_s": solve_time,
                "solver_iterations": decision.solver_iterations,
            }
        )
        queues = update_queues(queues, ev.energy_j, env.scenario.energy_budget_j)
        previous = Placement.of(decision, ev.rate_bps)
    return rows
