"""The paper's headline comparison: DSSDA against every baseline on the same seeded trace, in both readings
of micro-batching.

For the Transformer and the BERT scenarios of ``examples/`` (docs/paper-comparison.md), in each reading of
``--readings`` and each seed of ``--seeds`` (the config's top-level seed: channel trace, data split,
initial weights; default the scenarios' own):

- the readings (docs/system-model.md, "Two readings of micro-batching"): ``batch``, the scenarios as
  written (a fixed batch B per local step, M micro-batches of B/M), and ``microbatch``, the fixed
  micro-batch reading derived from them (b = B / ``scheduler.num_microbatches``, ``batch_size`` removed:
  a step trains M·b samples), :func:`reading_overrides`;

0. the bench-scale copy of step 2 trains ``uniform`` (its fixed M) for ``--train-rounds`` (default: the
   scenario's own, ``TRAINING``): its eval loss then is the seed's target, and with ``--convergence
   noise_scale`` (the default) its final smoothed gradient noise scale (:func:`measured_noise_scale`) is
   the B_noise of DSSDA's and myopic's convergence term in that scenario and seed; ``variance`` keeps
   the scenario's σ² term. ``uniform``'s fixed M trains the same B samples per step in micro-batches of
   B/M in both readings, so this is one run for both (:func:`check_uniform_trains_alike`);
1. modeled figures, at the scenario's own model size, over ``--rounds`` analytic rounds per reading and
   policy: mean round latency, latency per trained sample, computation efficiency (the busy share: per
   round Σ compute time / (devices × round latency), of all devices and of the devices holding blocks),
   peak device memory and the mean memory of the devices that hold blocks (each against ``fl``),
   time-average energy per device against its budget Ē_k;
2. end-to-end latency to a target eval loss with real training (simulated executor). Training at the
   scenario's size (Transformer-big / BERT-base widths) is too slow for a CPU bench, so a bench-scale
   copy (``TRAINING_SCALE``; per scenario ``TRAINING``: learning rate, held-out samples, uniform's
   training rounds; same data, blocks, batch, local iterations and optimizer, smaller widths) stands in
   for the training. The target is the eval loss ``uniform`` reaches after its training rounds (step 0);
   a policy's time to target is the sum of its modeled (full-size) round latencies up to the round its
   trajectory first reaches the target. Only the samples a step trains change the training (segments,
   bandwidth and power do not):

   - with a fixed batch every M trains the same B samples to the same gradient (up to float
     reassociation), so every policy's trajectory is ``uniform``'s: no other training runs, and each
     policy's time to target adds its own latencies up to ``uniform``'s round. One round replaying a
     policy whose M differs from ``uniform``'s checks it (:data:`FIXED_BATCH_RTOL`; the bench stops if
     it does not hold);
   - with a fixed micro-batch the copy replays each policy's M per round and cluster; every other
     trajectory trains until its own eval loss reaches the target or for ``--max-train-rounds``
     (default 2 × the training rounds, at most ``--rounds``). Policies with the same M sequence share a
     training run;
3. over the seeds (more than one), per reading and scenario: per policy the mean time to target with its
   Student-t 95 % interval, whether it holds the energy budgets, DSSDA's paired ratios to every baseline
   and to every budget holder, and the paper's three claims beside the paper's figures
   (``bench/paper_seeds.py``);
4. for the first reading and seed only (``--skip-extras`` skips them): a V sweep of DSSDA on the
   Transformer scenario — mean latency and mean penalty (T + the convergence part of the penalty over V,
   the term the O(1/V) bound is about) against the mean virtual-queue backlog (O(V)); blocks moved per
   round and the share of the round latency they cost for DSSDA deciding blind to the previous placement
   (before it weighs moves: ``blind_task``); DSSDA's decision time against the number of devices and of
   encoder blocks (a synthetic scenario with the variance term).

Writes ``paper.csv`` (one row per reading, scenario, seed and policy), ``paper-seeds.csv`` (per reading,
scenario and policy over the seeds), ``paper.json``, ``paper-decisions.json`` (every round's decision of
every run: M per cluster, blocks, modeled memory and compute time per device holding blocks, queues,
energy against budget, blocks moved, and for DSSDA the round's explanation with its counterfactuals; and
the eval losses) and a self-contained ``paper.html`` (plotly.js inlined) to ``--out``, prints the
headline table and the JSON summary (one line on stdout with ``--json``, the table then going to
stderr). Training runs single-threaded in
``--workers`` processes (torch's own threads are slower than one thread per process on a shared 2-core
machine).
Run: ``collapipe bench paper [--json] [--out DIR] [--readings batch,microbatch] [--rounds R]
[--train-rounds R] [--max-train-rounds R] [--seeds 1,2,3,4,5] [--convergence noise_scale|variance]
[--skip-extras] [--workers W] [--decision-devices 4,12,50,100,1000]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from collapipe_core.config import ExperimentConfig, TrainingConfig
from collapipe_core.costmodel import evaluate
from collapipe_core.decision import Decision
from collapipe_core.metrics import time_to_target
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.scheduler import get_policy
from collapipe_core.scheduler.baselines import equal_bandwidth_max_power, equal_split
from collapipe_core.sinks import MemorySink
from collapipe_core.state import Placement, RoundState, build_environment, observe, update_queues
from collapipe_core.validation import load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `collapipe bench paper` loads this file by path
    sys.path.insert(0, str(ROOT))
from bench.paper_output import (  # noqa: E402
    PAPER_CLAIMS,
    headline_table,
    ratios_to_dssda,
    write_csv,
    write_html,
    write_seeds_csv,
)
from bench.paper_seeds import aggregate  # noqa: E402

SCENARIOS = {
    "transformer": ROOT / "examples" / "paper-transformer.yaml",
    "bert": ROOT / "examples" / "paper-bert.yaml",
}
POLICIES = ("dssda", "uniform", "proportional", "random", "fl", "split", "myopic")
READINGS = ("batch", "microbatch")
FIXED_BATCH_RTOL = 1e-6
"""With a fixed batch, how far (relative) one round replaying another policy's M may lie from ``uniform``'s
first round, eval and train loss: float reassociation only (tests/core/pipeline/test_fixed_batch.py)."""
TRAINING_SCALE: dict[str, Any] = {"model.d_model": 64, "model.num_heads": 4, "model.ffn_dim": 256}


class TrainingSettings(NamedTuple):
    """The bench-scale choices of one scenario's copy (the full-size scenario the latencies are modeled on
    keeps its own): AdamW's learning rate, the held-out samples of each evaluation, and the rounds
    ``uniform`` trains to set the target (``--train-rounds`` overrides them for every scenario)."""

    lr: float
    eval_samples: int
    train_rounds: int


TRAINING = {  # uniform's bench-scale training in seeds 1-5 (docs/paper-comparison.md has the curves)
    # lr 0.005: eval loss 3.42-3.47 after round 1, 3.06-3.11 after 10 (the target), falling ~0.01 a round
    "paper-transformer": TrainingSettings(lr=0.005, eval_samples=128, train_rounds=10),
    # lr 0.001 (best of 0.0003-0.003): 1.76-1.90 after 25 rounds, chance 2.08; 512 held out: SE 0.02-0.03
    "paper-bert": TrainingSettings(lr=0.001, eval_samples=512, train_rounds=25),
}
TRAINING_DECODER_LAYERS = 1  # seq2seq copies keep one decoder layer (the edge server's part)
V_VALUES = (1.0, 10.0, 100.0, 1000.0, 10000.0)


def scenario_config(path: Path, **overrides: Any) -> ExperimentConfig:
    """The scenario at its own size, on the cost model."""
    return load_config(path, {"executor": "analytic", **overrides})


def reading_overrides(path: Path, reading: str) -> dict[str, Any]:
    """The config overrides of ``reading``: none for ``batch`` (the scenario as written, a fixed batch B);
    for ``microbatch`` the fixed micro-batch reading derived from it, b = B / ``scheduler.num_microbatches``
    and ``batch_size`` removed (the baselines' fixed M then trains the same B samples per step)."""
    if reading == "batch":
        return {}
    if reading != "microbatch":
        raise ValueError(f"unknown reading {reading!r}: {' or '.join(READINGS)}")
    written = scenario_config(path)
    batch = written.training.batch_size
    if batch is None:
        raise ValueError(f"{path.name}: the fixed micro-batch reading is derived from training.batch_size")
    return {
        "training.batch_size": None,
        "training.microbatch_size": batch // written.scheduler.num_microbatches,
    }


def training_config(path: Path, seed: int | None = None, reading: str = "batch") -> ExperimentConfig:
    """The bench-scale copy the real training runs (same data, blocks, batch, I, optimizer; smaller
    widths) in ``reading``; ``seed`` (default: the scenario's) draws its data split and initial weights."""
    full = scenario_config(path)
    layers = min(full.model.num_decoder_layers, TRAINING_DECODER_LAYERS)
    settings = TRAINING[path.stem]
    overrides = {
        **reading_overrides(path, reading),
        **TRAINING_SCALE,
        "training.lr": settings.lr,
        "data.eval_samples": settings.eval_samples,
        "model.num_decoder_layers": layers,
        "executor": "simulated",
        **({} if seed is None else {"seed": seed}),
    }
    return load_config(path, overrides)


def modeled_overrides(
    path: Path, reading: str, seed: int | None, convergence: str, noise_scale: float | None
) -> dict[str, Any]:
    """Config overrides of the analytic (full-size) runs: the reading, the seed (channel trace) and the
    convergence term, with the B_noise measured in uniform's training (:func:`measured_noise_scale`) for
    ``noise_scale``."""
    out: dict[str, Any] = {**reading_overrides(path, reading), **({} if seed is None else {"seed": seed})}
    out["scheduler.convergence"] = convergence
    if convergence == "noise_scale":
        out["scheduler.gradient_noise_scale"] = noise_scale
    return out


def run_policy(config: ExperimentConfig, policy: str, rounds: int, executor: str) -> list[RoundResult]:
    cfg = config.model_copy(
        update={
            "executor": executor,
            "scheduler": config.scheduler.model_copy(update={"policy": policy}),
            "training": config.training.model_copy(update={"rounds": rounds}),
        }
    )
    sink = MemorySink()
    Runner(cfg, sink).run()
    return sink.results


# -- modeled figures --------------------------------------------------------------------------------


def modeled_figures(results: list[RoundResult], training: TrainingConfig) -> dict[str, float]:
    """Figures of one policy's analytic rounds (``training``: how many samples a round trains).
    Computation efficiency is the busy share, mean over rounds: Σ compute time / (devices × T) of all
    devices (``efficiency``) and of the devices holding blocks (``efficiency_holders``)."""
    latency = [r.round.latency_s for r in results]
    compute = [sum(d.compute_s for d in r.devices) for r in results]
    holders = [[d.compute_s for d in r.devices if d.num_blocks > 0] for r in results]
    samples = [training.samples_per_round(r.round.num_microbatches) for r in results]
    devices = len(results[0].devices)
    energy_ratio: dict[str, list[float]] = {}
    for r in results:
        for d in r.devices:
            energy_ratio.setdefault(d.device_id, []).append(d.energy_j / d.energy_budget_j)
    per_device = [statistics.fmean(v) for v in energy_ratio.values()]
    held = [d.memory_bytes for r in results for d in r.devices if d.num_blocks > 0]
    return {
        "mean_latency_s": statistics.fmean(latency),
        "mean_samples_per_round": statistics.fmean(samples),
        "latency_per_sample_s": sum(latency) / sum(samples),
        "mean_microbatches": statistics.fmean(statistics.fmean(r.round.num_microbatches) for r in results),
        "efficiency": statistics.fmean(c / (devices * t) for c, t in zip(compute, latency, strict=True)),
        "efficiency_holders": statistics.fmean(
            sum(h) / (len(h) * t) for h, t in zip(holders, latency, strict=True)
        ),
        "peak_memory_bytes": max(held),
        "mean_memory_bytes": statistics.fmean(held),
        "energy_over_budget_max": max(per_device),
        "energy_over_budget_mean": statistics.fmean(per_device),
        "infeasible_rounds": sum(not r.round.feasible for r in results),
        "mean_blocks_moved": statistics.fmean(r.round.blocks_moved or 0 for r in results),
        "moves_latency_share": statistics.fmean(r.round.moves_latency_share or 0.0 for r in results),
    }


def decision_log(results: list[RoundResult], explained: bool = False) -> list[dict[str, Any]]:
    """Per round: what the policy decided and what it cost (the evidence for why a policy is slow); with
    ``explained`` also the round's explanation (its counterfactuals, each evaluated on the same state,
    and the sentence naming the term that decided)."""
    return [
        {
            "latency_s": r.round.latency_s,
            "microbatches": list(r.round.num_microbatches),
            "blocks_moved": r.round.blocks_moved,
            "redistribution_s": r.round.redistribution_s,
            "objective_latency": r.round.objective_latency,
            "objective_convergence": r.round.objective_convergence,
            "objective_energy": r.round.objective_energy,
            "blocks": {d.device_id: d.num_blocks for d in r.devices if d.num_blocks > 0},
            "memory_bytes": {d.device_id: d.memory_bytes for d in r.devices if d.num_blocks > 0},
            "compute_s": {d.device_id: d.compute_s for d in r.devices if d.num_blocks > 0},
            "queues": {d.device_id: d.queue for d in r.devices if d.queue > 0},
            "energy_over_budget": {d.device_id: d.energy_j / d.energy_budget_j for d in r.devices},
            **({"explanation": r.round.explanation} if explained else {}),
        }
        for r in results
    ]


def analytic_task(
    path: Path, policy: str, rounds: int, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One policy on one scenario: figures, per-round latencies, the M of every round and cluster and the
    decision log (DSSDA's with its explanations); ``overrides`` (:func:`modeled_overrides`) set the
    reading, the seed and the convergence term."""
    config = scenario_config(path, **(overrides or {}))
    results = run_policy(config, policy, rounds, "analytic")
    return {
        "figures": modeled_figures(results, config.training),
        "latency_series": [r.round.latency_s for r in results],
        "microbatches": [list(r.round.num_microbatches) for r in results],
        "decision_log": decision_log(results, explained=policy == "dssda"),
    }


def blind_task(path: Path, rounds: int, overrides: dict[str, Any] | None = None) -> dict[str, float]:
    """DSSDA deciding as if no TEB had a previous holder (blind to what moves cost), each round evaluated
    with the placement the round before left: DSSDA's row before it weighs moves."""
    config = scenario_config(path, **(overrides or {}))
    env = Runner(config.model_copy(update={"executor": "analytic"}), MemorySink()).env
    policy = get_policy("dssda")
    queues, previous = np.zeros(env.scenario.shape), None
    latency, moved, share, energy = [], [], [], []
    for t in range(rounds):
        state = observe(env, t, queues, previous)
        decision = policy.decide(dataclasses.replace(state, previous=None))
        ev = evaluate(state, decision)
        latency.append(ev.latency_s)
        moved.append(int(ev.blocks_moved.sum()))
        share.append(ev.moves_latency_s / ev.latency_s)
        energy.append(ev.energy_j / env.scenario.energy_budget_j)
        queues = update_queues(queues, ev.energy_j, env.scenario.energy_budget_j)
        previous = Placement.of(decision, ev.rate_bps)
    return {
        "mean_latency_s": statistics.fmean(latency),
        "mean_blocks_moved": statistics.fmean(moved),
        "moves_latency_share": statistics.fmean(share),
        "energy_over_budget_max": float(np.max(np.mean(energy, axis=0))),
    }


def v_sweep_task(
    path: Path, v: float, rounds: int, overrides: dict[str, Any] | None = None
) -> dict[str, float]:
    """DSSDA at ``V``; its penalty per round is T + (the convergence part of V·penalty)/V."""
    config = scenario_config(path, **{**(overrides or {}), "scheduler.V": v})
    results = run_policy(config, "dssda", rounds, "analytic")
    queues = np.array([[d.queue for d in r.devices] for r in results])  # (rounds, devices)
    energy = np.array([[d.energy_j / d.energy_budget_j for d in r.devices] for r in results])
    return {
        "V": v,
        "mean_latency_s": statistics.fmean(r.round.latency_s for r in results),
        "mean_penalty_s": statistics.fmean(
            r.round.latency_s + r.round.objective_convergence / v for r in results
        ),
        "mean_microbatches": float(np.mean([r.round.num_microbatches for r in results])),
        "mean_backlog": float(queues.mean()),
        "max_device_backlog": float(queues.mean(axis=0).max()),
        "energy_over_budget_max": float(energy.mean(axis=0).max()),
    }


# -- real training at bench scale -------------------------------------------------------------------


class ReplayMicrobatches:
    """Replays recorded micro-batch counts (round × cluster) with equal segments, bandwidth and p_max.

    Only M changes what the simulated executor trains (the mean gradient over the same M·b samples),
    so a trajectory of M is all a policy's loss curve depends on."""

    name = "replay"

    def __init__(self, microbatches: Sequence[Sequence[int]]) -> None:
        self.microbatches = [list(m) for m in microbatches]

    def decide(self, state: RoundState) -> Decision:
        blocks = state.profile.num_blocks
        delta = np.stack([equal_split(blocks, row) for row in state.available])
        beta, power = equal_bandwidth_max_power(state, delta)
        return Decision.from_arrays(delta, beta, power, self.microbatches[state.round_index])


def train_task(
    path: Path,
    microbatches: list[list[int]] | None,
    max_rounds: int,
    target: float | None,
    seed: int | None = None,
    reading: str = "batch",
) -> dict[str, list[Any]]:
    """Per round of the bench-scale copy in ``reading``: eval and train loss, the B_noise it measured
    (smoothed up to that round) and the M per cluster it trained. It replays ``microbatches``, or with
    None runs ``uniform`` itself (its fixed M: the run that sets the target and measures B_noise); stops
    at ``target``."""
    import torch

    torch.set_num_threads(1)
    config = training_config(path, seed, reading)
    config = config.model_copy(
        update={
            "training": config.training.model_copy(update={"rounds": max_rounds}),
            "scheduler": config.scheduler.model_copy(update={"policy": "uniform"}),
        }
    )
    sink = MemorySink()
    runner = Runner(config, sink)
    if microbatches is not None:
        runner.policy = ReplayMicrobatches(microbatches)

    def reached() -> bool:
        loss = sink.results[-1].round.eval_loss
        return target is not None and loss is not None and loss <= target

    runner.run(should_stop=reached)
    return {
        "eval_loss": [
            float(r.round.eval_loss if r.round.eval_loss is not None else float("nan")) for r in sink.results
        ],
        "train_loss": [
            float(r.round.train_loss if r.round.train_loss is not None else float("nan"))
            for r in sink.results
        ],
        "gradient_noise_scale": [r.round.gradient_noise_scale for r in sink.results],
        "microbatches": [list(r.round.num_microbatches) for r in sink.results],
    }


def measured_noise_scale(per_round: Sequence[float | None], scenario: str, seed: int | None) -> float:
    """B_noise of a training run (``per_round``: its smoothed estimate after each round): the final one,
    the ratio of the exponential moving averages of tr(Σ) and |G|² over all the run's rounds
    (:class:`collapipe_core.gradient_noise.NoiseScaleAverage`; over 10 rounds the rounds' estimates
    weigh 0.06 for the first to 0.15 for the last). Not the mean of ``per_round``: each of its values
    repeats the earlier rounds, so it weighs them 0.26 for the first to 0.015 for the last."""
    if not per_round or per_round[-1] is None:
        raise ValueError(
            f"{scenario} seed {'(own)' if seed is None else seed}: uniform's {len(per_round)} training rounds"
            " did not resolve the gradient from its noise (averaged |G|² not positive), so they measure no"
            " B_noise: train uniform for more rounds (--train-rounds), or use --convergence variance"
        )
    return float(per_round[-1])


# -- the comparison ---------------------------------------------------------------------------------


def _importable() -> None:
    """Worker processes find this file's functions by module name; `collapipe bench paper` loads it from
    a path, so register it (the pool forks, the children inherit sys.modules)."""
    if __name__ not in sys.modules:
        module = types.ModuleType(__name__)
        module.__dict__.update(globals())
        sys.modules[__name__] = module


def _progress(message: str) -> None:
    print(f"[bench paper] {message}", file=sys.stderr, flush=True)


def run_task(name: str, *args: Any) -> Any:
    tasks: dict[str, Callable[..., Any]] = {
        "analytic": analytic_task,
        "sweep": v_sweep_task,
        "blind": blind_task,
        "train": train_task,
    }
    return tasks[name](*args)


def _starmap(pool: Any, calls: list[tuple[Any, ...]]) -> list[Any]:
    return list(pool.starmap(run_task, calls)) if pool is not None else [run_task(*c) for c in calls]


class Plan(NamedTuple):  # not a dataclass: `collapipe bench paper` loads this file outside sys.modules
    """What one ``compare`` runs: ``seeds`` (None: each scenario's own), the readings of micro-batching,
    the convergence term of the modeled runs, uniform's training rounds and the cap of the others' (None:
    each scenario's own, :meth:`train_rounds_of`, :meth:`max_train_rounds_of`), and whether the first
    reading and seed also run the V sweep and the blind row."""

    rounds: int
    train_rounds: int | None = None
    max_train_rounds: int | None = None
    seeds: tuple[int | None, ...] = (None,)
    convergence: str = "noise_scale"
    extras: bool = True
    readings: tuple[str, ...] = READINGS

    def train_rounds_of(self, scenario: str) -> int:
        """The rounds uniform trains to set ``scenario``'s target: the plan's, or the scenario's own."""
        return TRAINING[scenario].train_rounds if self.train_rounds is None else self.train_rounds

    def max_train_rounds_of(self, scenario: str) -> int:
        """The rounds the other trajectories train at most: the plan's, or 2 × the scenario's training
        rounds, at most ``rounds``."""
        if self.max_train_rounds is not None:
            return self.max_train_rounds
        return min(2 * self.train_rounds_of(scenario), self.rounds)


def check_uniform_trains_alike(path: Path) -> None:
    """``uniform``'s bench-scale training is one run for both readings: its fixed M trains the same samples
    per step, in micro-batches of the same size, in the derived fixed micro-batch reading."""
    batch, micro = training_config(path, reading="batch"), training_config(path, reading="microbatch")
    m = batch.scheduler.num_microbatches
    work = [(c.training.samples_per_step(m), c.training.samples_per_microbatch(m)) for c in (batch, micro)]
    if work[0] != work[1]:
        raise AssertionError(
            f"{path.stem}: uniform's step at M = {m} trains (samples, per micro-batch) {work[0]} with a fixed"
            f" batch but {work[1]} with a fixed micro-batch; it cannot be one run for both readings"
        )


def trajectory_key(reading: str, microbatches: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """What a policy's bench-scale training depends on: with a fixed batch nothing (every M trains the same
    B samples per step to the same gradient), with a fixed micro-batch its M per round and cluster."""
    return () if reading == "batch" else tuple(tuple(m) for m in microbatches)


def differing_policy(runs: dict[str, dict[str, Any]]) -> str | None:
    """The first policy whose first-round M differs from uniform's (None: every policy trains uniform's)."""
    first = runs["uniform"]["microbatches"][0]
    return next((p for p in POLICIES if runs[p]["microbatches"][0] != first), None)


def fixed_batch_check(
    name: str, policy: str, microbatches: list[int], replayed: dict[str, Any], uniform: dict[str, Any]
) -> dict[str, Any]:
    """One round replaying ``policy``'s M against uniform's first round with a fixed batch; raises when
    they differ by more than :data:`FIXED_BATCH_RTOL` (then M would change the training)."""
    pairs = [(replayed[k][0], uniform[k][0]) for k in ("eval_loss", "train_loss")]
    difference = max(abs(a - b) / abs(b) for a, b in pairs)
    if not difference <= FIXED_BATCH_RTOL:
        raise AssertionError(
            f"{name}: one round replaying {policy}'s M {microbatches} trained to (eval, train) loss"
            f" {pairs[0][0]:.6g}, {pairs[1][0]:.6g} against uniform's {pairs[0][1]:.6g}, {pairs[1][1]:.6g}"
            f" (relative difference {difference:.2g} > {FIXED_BATCH_RTOL:g}); with a fixed batch M does not"
            " change the training, so the policies cannot share uniform's run"
        )
    return {
        "policy": policy,
        "microbatches": microbatches,
        "eval_loss": pairs[0][0],
        "uniform_eval_loss": pairs[0][1],
        "train_loss": pairs[1][0],
        "uniform_train_loss": pairs[1][1],
        "relative_difference": difference,
    }


Key = tuple[str, int | None, str]  # (reading, seed, scenario)


def compare(plan: Plan, workers: int) -> tuple[list[dict[str, Any]], list[dict[str, float]] | None]:
    """Every scenario in every reading and seed, in this order: uniform's bench-scale training (one run
    for both readings: the target and, for ``noise_scale``, B_noise), the modeled policies with that
    B_noise, then the bench-scale training of the other M trajectories to the target (fixed micro-batch)
    and the one-round replays that check M changes nothing (fixed batch). Returns one entry per (reading,
    seed, scenario), reading-major then seed-major, and the V sweep (first reading and seed) or None."""
    _importable()
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(workers) if workers > 1 else None
    names = list(SCENARIOS)
    cases = [(seed, s) for seed in plan.seeds for s in names]  # seed-major: the first seed's come first
    keys: list[Key] = [(reading, seed, s) for reading in plan.readings for seed, s in cases]
    try:
        if set(plan.readings) == set(READINGS):
            for s in names:
                check_uniform_trains_alike(SCENARIOS[s])
        # uniform's M does not depend on B_noise: its training comes first and measures it
        uniform_runs = _starmap(
            pool,
            [
                (
                    "train",
                    SCENARIOS[s],
                    None,
                    plan.train_rounds_of(SCENARIOS[s].stem),
                    None,
                    seed,
                    plan.readings[0],
                )
                for seed, s in cases
            ],
        )
        trained_uniform = dict(zip(cases, uniform_runs, strict=True))
        targets = {case: run["eval_loss"][-1] for case, run in trained_uniform.items()}
        noise: dict[tuple[int | None, str], float | None] = dict.fromkeys(cases)
        if plan.convergence == "noise_scale":
            noise = {
                (seed, s): measured_noise_scale(
                    trained_uniform[(seed, s)]["gradient_noise_scale"], SCENARIOS[s].stem, seed
                )
                for seed, s in cases
            }
        _progress(
            "trained uniform: rounds, target eval loss, B_noise "
            + ", ".join(
                f"{s} seed {'(own)' if seed is None else seed}: {plan.train_rounds_of(SCENARIOS[s].stem)},"
                f" {targets[(seed, s)]:.4g}, "
                + ("—" if noise[(seed, s)] is None else f"{noise[(seed, s)]:.3g}")
                for seed, s in cases
            )
        )

        def overrides(key: Key) -> dict[str, Any]:
            reading, seed, s = key
            return modeled_overrides(SCENARIOS[s], reading, seed, plan.convergence, noise[(seed, s)])

        calls = [
            ("analytic", SCENARIOS[key[2]], p, plan.rounds, overrides(key)) for key in keys for p in POLICIES
        ]
        first = plan.seeds[0]
        extra_calls: list[tuple[Any, ...]] = []
        if plan.extras:
            extra_calls += [
                (
                    "sweep",
                    SCENARIOS["transformer"],
                    v,
                    plan.rounds,
                    overrides((plan.readings[0], first, "transformer")),
                )
                for v in V_VALUES
            ]
            extra_calls += [
                ("blind", SCENARIOS[s], plan.rounds, overrides((plan.readings[0], first, s))) for s in names
            ]
        done = _starmap(pool, calls + extra_calls)
        _progress(f"modeled {len(calls)} policy runs and {len(extra_calls)} sweep and blind runs")
        analytic = {
            key: dict(zip(POLICIES, done[i * len(POLICIES) : (i + 1) * len(POLICIES)], strict=True))
            for i, key in enumerate(keys)
        }
        sweep = done[len(calls) : len(calls) + len(V_VALUES)] if plan.extras else None
        blind = dict(zip(names, done[len(calls) + len(V_VALUES) :], strict=True)) if plan.extras else {}
        # training: one run per distinct trajectory; uniform's group shares uniform's run
        groups: dict[Key, dict[tuple[tuple[int, ...], ...], list[str]]] = {}
        for key in keys:
            reading, seed, s = key
            stem = SCENARIOS[s].stem
            groups[key] = {}
            for p in POLICIES:
                microbatches = analytic[key][p]["microbatches"][: plan.max_train_rounds_of(stem)]
                groups[key].setdefault(trajectory_key(reading, microbatches), []).append(p)
            modeled = analytic[key]["uniform"]["microbatches"][: plan.train_rounds_of(stem)]
            assert trained_uniform[(seed, s)]["microbatches"] == modeled, (
                "uniform's M is fixed at both scales"
            )
        rest = [
            (key, trajectory)
            for key in keys
            for trajectory, members in groups[key].items()
            if "uniform" not in members
        ]
        checks = {
            key: policy
            for key in keys
            if key[0] == "batch" and (policy := differing_policy(analytic[key])) is not None
        }
        trained = _starmap(
            pool,
            [
                (
                    "train",
                    SCENARIOS[s],
                    [list(m) for m in trajectory],
                    plan.max_train_rounds_of(SCENARIOS[s].stem),
                    targets[(seed, s)],
                    seed,
                    reading,
                )
                for (reading, seed, s), trajectory in rest
            ]
            + [  # with a fixed batch: one round of the policy's first M
                (
                    "train",
                    SCENARIOS[key[2]],
                    analytic[key][policy]["microbatches"][:1],
                    1,
                    None,
                    key[1],
                    "batch",
                )
                for key, policy in checks.items()
            ],
        )
        trained_rest, replayed = trained[: len(rest)], dict(zip(checks, trained[len(rest) :], strict=True))
        _progress(f"trained {len(rest)} more micro-batch trajectories and {len(checks)} fixed-batch replays")
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    runs = []
    for key in keys:
        reading, seed, s = key
        case = (seed, s)
        config = scenario_config(SCENARIOS[s], **overrides(key))
        name = f"{SCENARIOS[s].stem} seed {config.seed}"
        check = None
        if key in checks:
            policy = checks[key]
            first_m = analytic[key][policy]["microbatches"][0]
            check = fixed_batch_check(name, policy, first_m, replayed[key], trained_uniform[case])
        trained_by: dict[str, dict[str, Any]] = {}
        for trajectory, members in groups[key].items():
            run = (
                trained_uniform[case] if "uniform" in members else trained_rest[rest.index((key, trajectory))]
            )
            for p in members:
                trained_by[p] = run
        losses = {p: trained_by[p]["eval_loss"] for p in POLICIES}
        figures = {p: dict(analytic[key][p]["figures"]) for p in POLICIES}
        for f in figures.values():
            f["memory_ratio_to_fl"] = f["peak_memory_bytes"] / figures["fl"]["peak_memory_bytes"]
            f["mean_memory_ratio_to_fl"] = f["mean_memory_bytes"] / figures["fl"]["mean_memory_bytes"]
        for p in POLICIES:
            f = figures[p]
            # training stops at the target: its losses cover the first rounds of the latency series
            latencies = analytic[key][p]["latency_series"][: len(losses[p])]
            reached = time_to_target(latencies, losses[p], targets[case])
            f["time_to_target_s"], f["rounds_to_target"] = reached if reached else (None, None)
            f["trained_rounds"] = len(losses[p])
            f["elapsed_trained_s"] = sum(latencies)  # a lower bound of the time to target if not reached
            f["final_eval_loss"] = losses[p][-1]
        runs.append(
            {
                "reading": reading,
                "scenario": SCENARIOS[s].stem,
                "seed": config.seed,
                "convergence": plan.convergence,
                "train_rounds": plan.train_rounds_of(SCENARIOS[s].stem),
                "max_train_rounds": plan.max_train_rounds_of(SCENARIOS[s].stem),
                "gradient_noise_scale": noise[case],
                "target_eval_loss": targets[case],
                "dssda_blind_to_moves": blind.get(s)
                if (reading, seed) == (plan.readings[0], first)
                else None,
                "training_groups": list(groups[key].values()),
                "fixed_batch_check": check,
                "figures": figures,
                "eval_loss": losses,
                "training_noise_scale": trained_uniform[case]["gradient_noise_scale"],
                "latency_series": {p: analytic[key][p]["latency_series"] for p in POLICIES},
                "decision_log": {p: analytic[key][p]["decision_log"] for p in POLICIES},
            }
        )
    return runs, sweep


def decision_times(devices: tuple[int, ...], blocks: tuple[int, ...], repeats: int) -> list[dict[str, float]]:
    rows: list[dict[str, float]] = []
    policy = get_policy("dssda")
    for num_blocks in blocks:
        for num_devices in devices:
            per_cluster = 4 if num_devices % 5 else 5  # 4 → 1×4, 12 → 3×4, 50 → 10×5, 1000 → 200×5
            clusters = max(1, num_devices // per_cluster)
            config = parse_config(
                {
                    "executor": "analytic",
                    "network": {
                        "num_clusters": clusters,
                        "devices_per_cluster": per_cluster,
                        "memory_bytes": {"low": 2e9, "high": 4e9},
                    },
                    "model": {"num_blocks": num_blocks, "d_model": 64, "ffn_dim": 256},
                    "data": {"dataset": "synthetic-reverse", "samples_per_cluster": 64, "eval_samples": 16},
                }
            )
            env = build_environment(config, 12, 12, None)
            if not rows:  # one untimed decision first: the first call pays one-off start-up costs
                policy.decide(observe(env, repeats))
            times = []
            for t in range(repeats):
                state = observe(env, t)
                started = time.perf_counter()
                policy.decide(state)
                times.append(time.perf_counter() - started)
            rows.append(
                {
                    "devices": clusters * per_cluster,
                    "blocks": num_blocks,
                    "median_ms": 1000 * statistics.median(times),
                    "max_ms": 1000 * max(times),
                }
            )
    return rows


def _seeds(text: str) -> tuple[int | None, ...]:
    if not text:
        return (None,)
    try:
        seeds = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give integers, e.g. 1,2,3,4,5") from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give distinct non-negative integers")
    return seeds


def _readings(text: str) -> tuple[str, ...]:
    readings = tuple(r.strip() for r in text.split(","))
    if not readings or not set(readings) <= set(READINGS) or len(set(readings)) != len(readings):
        raise argparse.ArgumentTypeError(
            f"--readings {text!r}: give {', '.join(READINGS[:-1])}, {READINGS[-1]} or both, comma-separated"
            " (batch: the scenarios' fixed batch B; microbatch: fixed micro-batches of B / num_microbatches)"
        )
    return readings


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="collapipe bench paper", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--readings",
        type=_readings,
        default=READINGS,
        help="readings of micro-batching, comma-separated (default both): batch, the scenarios' fixed batch"
        " B split into M micro-batches; microbatch, fixed micro-batches of B / scheduler.num_microbatches",
    )
    parser.add_argument("--rounds", type=int, default=60, help="analytic rounds per policy and per V")
    parser.add_argument(
        "--train-rounds",
        type=int,
        default=None,
        help="rounds uniform trains to set the target, in every scenario (default: each scenario's own, "
        + ", ".join(f"{name} {t.train_rounds}" for name, t in TRAINING.items())
        + ")",
    )
    parser.add_argument(
        "--max-train-rounds",
        type=int,
        default=None,
        help="rounds the other trajectories train at most to reach the target (default: 2 × the scenario's"
        " --train-rounds, at most --rounds)",
    )
    parser.add_argument(
        "--seeds",
        type=_seeds,
        default=(None,),
        help="comma-separated config seeds (channel trace, data split, initial weights); default: the"
        " scenarios' own",
    )
    parser.add_argument(
        "--convergence",
        choices=("noise_scale", "variance"),
        default="noise_scale",
        help="DSSDA's convergence term: noise_scale with B_noise measured in uniform's bench-scale training"
        " to the target, per scenario and seed (default), or variance with the scenario's σ²",
    )
    parser.add_argument(
        "--skip-extras",
        action="store_true",
        help="skip the V sweep, DSSDA blind to moves and the decision-time grid (run for the first seed)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes for the policies and the training")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--decision-devices",
        default="4,12,50,100,1000",
        help="device counts of the decision-time grid (comma-separated)",
    )
    args = parser.parse_args(argv)
    plan = Plan(
        args.rounds,
        args.train_rounds,
        args.max_train_rounds,
        args.seeds,
        args.convergence,
        not args.skip_extras,
        args.readings,
    )
    for name in TRAINING:
        train_rounds, cap = plan.train_rounds_of(name), plan.max_train_rounds_of(name)
        if train_rounds > args.rounds:
            parser.error(
                f"{name}: uniform trains {train_rounds} rounds (--train-rounds) but --rounds is"
                f" {args.rounds}; raise --rounds or lower --train-rounds"
            )
        if not train_rounds <= cap <= args.rounds:
            parser.error(
                f"{name}: --max-train-rounds ({cap}) must lie between the rounds uniform trains"
                f" ({train_rounds}, --train-rounds) and --rounds ({args.rounds}): time to target adds the"
                " modeled latencies of the trained rounds"
            )
    started = time.perf_counter()
    scenarios, sweep = compare(plan, args.workers)
    over_seeds = aggregate(scenarios)
    report: dict[str, Any] = {
        "scenarios": scenarios,
        "v_sweep": sweep,
        "over_seeds": over_seeds,
        "decision_time": (
            []
            if args.skip_extras
            else decision_times(
                tuple(int(d) for d in args.decision_devices.split(",")), (6, 12, 24, 48), repeats=5
            )
        ),
    }
    first = scenarios[0]["seed"]
    first_seed = [s for s in scenarios if s["seed"] == first]
    report["summary"] = {
        "paper_claims": PAPER_CLAIMS,
        "scales": {
            "modeled": "the examples' own model sizes",
            "training": {
                **TRAINING_SCALE,
                "per_scenario": {name: t._asdict() for name, t in TRAINING.items()},
            },
        },
        "plan": {
            **plan._asdict(),
            "train_rounds": {name: plan.train_rounds_of(name) for name in TRAINING},
            "max_train_rounds": {name: plan.max_train_rounds_of(name) for name in TRAINING},
            "seeds": [
                s["seed"]
                for s in scenarios
                if (s["reading"], s["scenario"]) == (plan.readings[0], "paper-transformer")
            ],
        },
        "ours": {
            reading: {
                s["scenario"]: {
                    "seed": s["seed"],
                    "gradient_noise_scale": s["gradient_noise_scale"],
                    "target_eval_loss": s["target_eval_loss"],
                    "ratios_dssda_to": ratios_to_dssda(s["figures"]),
                    "memory_ratio_dssda_to_fl": s["figures"]["dssda"]["memory_ratio_to_fl"],
                    "mean_memory_ratio_dssda_to_fl": s["figures"]["dssda"]["mean_memory_ratio_to_fl"],
                    "energy_over_budget_max": {
                        p: f["energy_over_budget_max"] for p, f in s["figures"].items()
                    },
                    "time_to_target_s": {p: f["time_to_target_s"] for p, f in s["figures"].items()},
                    "fixed_batch_check": s["fixed_batch_check"],
                }
                for s in first_seed
                if s["reading"] == reading
            }
            for reading in plan.readings
        },
        "per_seed": [
            {
                "reading": s["reading"],
                "scenario": s["scenario"],
                "seed": s["seed"],
                "gradient_noise_scale": s["gradient_noise_scale"],
                "target_eval_loss": s["target_eval_loss"],
                "figures": s["figures"],
            }
            for s in scenarios
        ],
        "over_seeds": over_seeds,
        "v_sweep": sweep,
        "decision_time": report["decision_time"],
        "wall_time_s": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "paper.csv", scenarios)
    write_seeds_csv(args.out / "paper-seeds.csv", over_seeds)
    write_html(args.out / "paper.html", report)
    (args.out / "paper.json").write_text(json.dumps(report["summary"], indent=2, default=float))
    decisions = [
        {
            k: s[k]
            for k in ("reading", "scenario", "seed", "eval_loss", "training_noise_scale", "decision_log")
        }
        for s in scenarios
    ]
    (args.out / "paper-decisions.json").write_text(json.dumps(decisions, default=float))
    table = headline_table(report)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps(report["summary"], default=float))
    else:
        print(table)
        print(json.dumps(report["summary"], indent=2, default=float))
    return report


if __name__ == "__main__":
    main()
