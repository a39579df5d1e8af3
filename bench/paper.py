"""The paper's headline comparison: DSSDA against every baseline on the same seeded trace.

For the Transformer and the BERT scenarios of ``examples/`` (docs/paper-comparison.md):

1. modeled figures, at the scenario's own model size, over ``--rounds`` analytic rounds per policy:
   mean round latency, latency per trained sample (policies train different numbers of micro-batches
   per round), computation efficiency = Σ device compute time / (devices × round latency), peak device
   memory and the mean memory of the devices that hold blocks (each against ``fl``), time-average
   energy per device against its budget Ē_k;
2. end-to-end latency to a target eval loss with real training (simulated executor). Training at the
   scenario's size (Transformer-big / BERT-base widths) is too slow for a CPU bench, so a bench-scale
   copy (``TRAINING_SCALE``, ``TRAINING_LR``: same data, blocks, micro-batch size, local iterations
   and optimizer, smaller widths) replays each policy's micro-batch counts M per round and cluster,
   the only part of a decision that changes the gradient (segments, bandwidth and power do not).
   The target is the eval loss ``uniform`` reaches after ``--train-rounds``; every other trajectory
   trains until its own eval loss reaches it or for 2 × ``--train-rounds``. A policy's time to target
   is the sum of its modeled (full-size) round latencies until then. Policies with the same M
   sequence share one training run;
3. a V sweep of DSSDA on the Transformer scenario: mean latency and mean penalty T + λ·G(M) (the term
   the O(1/V) bound is about) against the mean virtual-queue backlog (O(V));
4. DSSDA's decision time against the number of devices and of encoder blocks;
5. blocks moved per round and the share of the round latency they cost (the redistribution's moved
   optimizer state), for every policy and for DSSDA deciding blind to the previous placement (before it
   weighs moves: ``blind_task``).

Writes ``paper.csv``, ``paper.json`` and a self-contained ``paper.html`` (plotly.js inlined) to
``--out``, prints the headline table and the JSON summary (one line on stdout with ``--json``, the table
then going to stderr). Training runs single-threaded in ``--workers`` processes (torch's own threads
are slower than one thread per process on a shared 2-core machine).
Run: ``collapipe bench paper [--json] [--out DIR] [--rounds R] [--train-rounds R] [--workers W]
[--decision-devices 4,12,50,100,1000]``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import multiprocessing
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collapipe_core.config import ExperimentConfig
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
SCENARIOS = {
    "transformer": ROOT / "examples" / "paper-transformer.yaml",
    "bert": ROOT / "examples" / "paper-bert.yaml",
}
POLICIES = ("dssda", "uniform", "proportional", "random", "fl", "split", "myopic")
BASELINES = POLICIES[1:]
TRAINING_SCALE: dict[str, Any] = {
    "model.d_model": 64,
    "model.num_heads": 4,
    "model.ffn_dim": 256,
    "data.eval_samples": 128,
}
TRAINING_LR = {  # AdamW at width 64, chosen so each copy's eval loss falls within ~10 rounds
    "paper-transformer": 0.005,  # (BERT at 0.005 or 0.01 stalls near chance, ln 8 ≈ 2.08)
    "paper-bert": 0.002,
}
TRAINING_DECODER_LAYERS = 1  # seq2seq copies keep one decoder layer (the edge server's part)
V_VALUES = (1.0, 10.0, 100.0, 1000.0, 10000.0)
PAPER_CLAIMS = {"latency_reduction_pct": 48.98, "efficiency_gain_pct": 15.09, "memory_ratio_to_fl": 0.5}


def scenario_config(path: Path, **overrides: Any) -> ExperimentConfig:
    """The scenario at its own size, on the cost model."""
    return load_config(path, {"executor": "analytic", **overrides})


def training_config(path: Path) -> ExperimentConfig:
    """The bench-scale copy the real training runs (same data, blocks, b, I, optimizer; smaller widths)."""
    full = scenario_config(path)
    layers = min(full.model.num_decoder_layers, TRAINING_DECODER_LAYERS)
    overrides = {
        **TRAINING_SCALE,
        "training.lr": TRAINING_LR[path.stem],
        "model.num_decoder_layers": layers,
        "executor": "simulated",
    }
    return load_config(path, overrides)


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


def modeled_figures(results: list[RoundResult], samples_per_microbatch: int) -> dict[str, float]:
    """Figures of one policy's analytic rounds; ``samples_per_microbatch`` = b × local iterations."""
    latency = [r.round.latency_s for r in results]
    compute = [sum(d.compute_s for d in r.devices) for r in results]
    samples = [samples_per_microbatch * sum(r.round.num_microbatches) for r in results]
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
        "peak_memory_bytes": max(held),
        "mean_memory_bytes": statistics.fmean(held),
        "energy_over_budget_max": max(per_device),
        "energy_over_budget_mean": statistics.fmean(per_device),
        "infeasible_rounds": sum(not r.round.feasible for r in results),
        "mean_blocks_moved": statistics.fmean(r.round.blocks_moved or 0 for r in results),
        "moves_latency_share": statistics.fmean(r.round.moves_latency_share or 0.0 for r in results),
    }


def analytic_task(path: Path, policy: str, rounds: int) -> dict[str, Any]:
    """One policy on one scenario: figures, per-round latencies and the M of every round and cluster."""
    config = scenario_config(path)
    results = run_policy(config, policy, rounds, "analytic")
    per_microbatch = config.training.microbatch_size * config.training.local_iterations
    return {
        "figures": modeled_figures(results, per_microbatch),
        "latency_series": [r.round.latency_s for r in results],
        "microbatches": [list(r.round.num_microbatches) for r in results],
    }


def blind_task(path: Path, rounds: int) -> dict[str, float]:
    """DSSDA deciding as if no TEB had a previous holder (blind to what moves cost), each round evaluated
    with the placement the round before left: DSSDA's row before it weighs moves."""
    config = scenario_config(path)
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


def v_sweep_task(path: Path, v: float, rounds: int) -> dict[str, float]:
    config = scenario_config(path, **{"scheduler.V": v})
    results = run_policy(config, "dssda", rounds, "analytic")
    lam = config.scheduler.lambda_
    queues = np.array([[d.queue for d in r.devices] for r in results])  # (rounds, devices)
    energy = np.array([[d.energy_j / d.energy_budget_j for d in r.devices] for r in results])
    return {
        "V": v,
        "mean_latency_s": statistics.fmean(r.round.latency_s for r in results),
        "mean_penalty_s": statistics.fmean(r.round.latency_s + lam * r.round.convergence for r in results),
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
    path: Path, microbatches: list[list[int]], max_rounds: int, target: float | None
) -> list[float]:
    """Eval loss per round of the bench-scale copy replaying ``microbatches``; stops at ``target``."""
    import torch

    torch.set_num_threads(1)
    config = training_config(path)
    config = config.model_copy(update={"training": config.training.model_copy(update={"rounds": max_rounds})})
    sink = MemorySink()
    runner = Runner(config, sink)
    runner.policy = ReplayMicrobatches(microbatches)

    def reached() -> bool:
        loss = sink.results[-1].round.eval_loss
        return target is not None and loss is not None and loss <= target

    runner.run(should_stop=reached)
    return [float(r.round.eval_loss if r.round.eval_loss is not None else float("nan")) for r in sink.results]


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


def compare(
    rounds: int, train_rounds: int, workers: int
) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
    _importable()
    cap = min(2 * train_rounds, rounds)
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(workers) if workers > 1 else None
    try:
        names = list(SCENARIOS)
        calls = [("analytic", SCENARIOS[s], p, rounds) for s in names for p in POLICIES]
        sweep_calls = [("sweep", SCENARIOS["transformer"], v, rounds) for v in V_VALUES]
        blind_calls = [("blind", SCENARIOS[s], rounds) for s in names]
        done = _starmap(pool, calls + sweep_calls + blind_calls)
        blind = dict(zip(names, done[len(calls) + len(sweep_calls) :], strict=True))
        _progress(f"modeled {len(calls)} policy runs and {len(sweep_calls)} V values")
        analytic = {
            s: dict(zip(POLICIES, done[i * len(POLICIES) : (i + 1) * len(POLICIES)], strict=True))
            for i, s in enumerate(names)
        }
        sweep = done[len(calls) : len(calls) + len(sweep_calls)]
        # training: one run per distinct M trajectory; the uniform group first, it sets the target
        groups: dict[str, dict[tuple[tuple[int, ...], ...], list[str]]] = {}
        for s in names:
            groups[s] = {}
            for p in POLICIES:
                key = tuple(tuple(m) for m in analytic[s][p]["microbatches"][:cap])
                groups[s].setdefault(key, []).append(p)
        first = _starmap(
            pool,
            [
                ("train", SCENARIOS[s], analytic[s]["uniform"]["microbatches"], train_rounds, None)
                for s in names
            ],
        )
        targets = {s: first[i][-1] for i, s in enumerate(names)}
        _progress(f"trained uniform for {train_rounds} rounds: target eval losses {targets}")
        rest = [(s, key) for s in names for key, members in groups[s].items() if "uniform" not in members]
        losses_rest = _starmap(
            pool, [("train", SCENARIOS[s], [list(m) for m in key], cap, targets[s]) for s, key in rest]
        )
        _progress(f"trained {len(rest)} more micro-batch trajectories")
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    scenarios = []
    for i, s in enumerate(names):
        losses: dict[str, list[float]] = {}
        for key, members in groups[s].items():
            curve = first[i] if "uniform" in members else losses_rest[rest.index((s, key))]
            for p in members:
                losses[p] = curve
        figures = {p: dict(analytic[s][p]["figures"]) for p in POLICIES}
        for f in figures.values():
            f["memory_ratio_to_fl"] = f["peak_memory_bytes"] / figures["fl"]["peak_memory_bytes"]
            f["mean_memory_ratio_to_fl"] = f["mean_memory_bytes"] / figures["fl"]["mean_memory_bytes"]
        for p in POLICIES:
            f = figures[p]
            # training stops at the target: its losses cover the first rounds of the latency series
            latencies = analytic[s][p]["latency_series"][: len(losses[p])]
            reached = time_to_target(latencies, losses[p], targets[s])
            f["time_to_target_s"], f["rounds_to_target"] = reached if reached else (None, None)
            f["trained_rounds"] = len(losses[p])
            f["final_eval_loss"] = losses[p][-1]
        scenarios.append(
            {
                "scenario": SCENARIOS[s].stem,
                "target_eval_loss": targets[s],
                "dssda_blind_to_moves": blind[s],
                "training_groups": list(groups[s].values()),
                "figures": figures,
                "eval_loss": losses,
                "latency_series": {p: analytic[s][p]["latency_series"] for p in POLICIES},
            }
        )
    return scenarios, sweep


def ratios_to_dssda(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    d = figures["dssda"]
    out: dict[str, dict[str, float | None]] = {}
    for p in BASELINES:
        f = figures[p]
        ttt = d["time_to_target_s"], f["time_to_target_s"]
        out[p] = {
            "latency_ratio": d["mean_latency_s"] / f["mean_latency_s"],
            "latency_per_sample_ratio": d["latency_per_sample_s"] / f["latency_per_sample_s"],
            "time_to_target_ratio": ttt[0] / ttt[1] if ttt[0] and ttt[1] else None,
            "efficiency_ratio": d["efficiency"] / f["efficiency"] if f["efficiency"] > 0 else None,
        }
    return out


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


# -- output -----------------------------------------------------------------------------------------

CSV_KEYS = [
    "mean_latency_s",
    "latency_per_sample_s",
    "mean_samples_per_round",
    "mean_microbatches",
    "efficiency",
    "peak_memory_bytes",
    "memory_ratio_to_fl",
    "mean_memory_bytes",
    "mean_memory_ratio_to_fl",
    "energy_over_budget_max",
    "energy_over_budget_mean",
    "time_to_target_s",
    "rounds_to_target",
    "trained_rounds",
    "final_eval_loss",
    "infeasible_rounds",
    "mean_blocks_moved",
    "moves_latency_share",
]


def write_csv(path: Path, scenarios: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["scenario", "policy", *CSV_KEYS])
        for s in scenarios:
            for p, f in s["figures"].items():
                writer.writerow([s["scenario"], p, *(f[k] for k in CSV_KEYS)])


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def headline_table(report: dict[str, Any]) -> str:
    """The readable summary: DSSDA against each baseline, then each policy's own figures."""
    lines = []
    for s in report["scenarios"]:
        figs, ratios = s["figures"], ratios_to_dssda(s["figures"])
        lines.append(
            f"== {s['scenario']}  (target eval loss {s['target_eval_loss']:.3f}, bench-scale training)"
        )
        lines.append("DSSDA / baseline   round-latency  per-sample  to-target  efficiency")
        for p, r in ratios.items():
            lines.append(
                f"  {p:14s}  {_fmt(r['latency_ratio']):>13s}  {_fmt(r['latency_per_sample_ratio']):>10s}"
                f"  {_fmt(r['time_to_target_ratio']):>9s}  {_fmt(r['efficiency_ratio']):>10s}"
            )
        lines.append(
            "policy          latency_s  s/sample   M    eff  peak_GB mean_GB  peak/fl mean/fl  E/Ē_max"
            "  to_target_s (rounds)"
        )
        for p, f in figs.items():
            ttt = (
                f"{f['time_to_target_s']:.0f} ({f['rounds_to_target']})"
                if f["time_to_target_s"]
                else (f"not in {f['trained_rounds']}")
            )
            lines.append(
                f"  {p:12s}  {f['mean_latency_s']:9.1f}  {f['latency_per_sample_s']:8.4f}"
                f"  {f['mean_microbatches']:4.1f}  {f['efficiency']:.3f}"
                f"  {f['peak_memory_bytes'] / 1e9:7.2f} {f['mean_memory_bytes'] / 1e9:7.2f}"
                f"  {f['memory_ratio_to_fl']:7.2f} {f['mean_memory_ratio_to_fl']:7.2f}"
                f"  {f['energy_over_budget_max']:7.2f}  {ttt}"
            )
        blind = s["dssda_blind_to_moves"]
        lines.append(
            "blocks moved per round (share of latency they cost): "
            + ", ".join(
                f"{p} {f['mean_blocks_moved']:.2f} ({100 * f['moves_latency_share']:.1f} %)"
                for p, f in figs.items()
            )
            + f"; dssda blind to moves {blind['mean_blocks_moved']:.2f}"
            f" ({100 * blind['moves_latency_share']:.1f} %, latency {blind['mean_latency_s']:.1f} s,"
            f" E/Ē_max {blind['energy_over_budget_max']:.2f})"
        )
    lines.append("== V sweep (DSSDA, paper-transformer)")
    lines.append("       V  latency_s  penalty_s     M  mean_backlog_J  max_device_backlog_J  E/Ē_max")
    for r in report["v_sweep"]:
        lines.append(
            f"  {r['V']:6g}  {r['mean_latency_s']:9.1f}  {r['mean_penalty_s']:9.1f}"
            f"  {r['mean_microbatches']:4.1f}  {r['mean_backlog']:14.1f}"
            f"  {r['max_device_backlog']:20.1f}  {r['energy_over_budget_max']:7.2f}"
        )
    lines.append("== DSSDA decision time (median ms; rows: blocks, columns: devices)")
    dt = report["decision_time"]
    devices = sorted({int(r["devices"]) for r in dt})
    lines.append("  blocks " + "".join(f"{d:>9d}" for d in devices))
    for b in sorted({int(r["blocks"]) for r in dt}):
        row = {int(r["devices"]): r["median_ms"] for r in dt if int(r["blocks"]) == b}
        lines.append(f"  {b:6d} " + "".join(f"{row[d]:9.1f}" for d in devices))
    lines.append(
        f"paper: ≥ {PAPER_CLAIMS['latency_reduction_pct']}% lower latency, up to +"
        f"{PAPER_CLAIMS['efficiency_gain_pct']}% efficiency, device memory < 0.5 × fl"
    )
    lines.append(f"wall time {report['summary']['wall_time_s']:.0f} s")
    return "\n".join(lines)


HTML_NOTE = (
    "<p>Modeled figures (latency, efficiency, memory, energy) come from the cost model at the scenarios' "
    "own sizes (Transformer-big and BERT-base widths, examples/). Eval losses come from really training a "
    "bench-scale copy (d_model 64, same data, blocks, micro-batch size, local iterations) that replays "
    "each policy's micro-batch counts; time to target adds the modeled full-size round latencies until "
    "the copy's eval loss reaches the target. See docs/paper-comparison.md.</p>"
)


def write_html(path: Path, report: dict[str, Any]) -> None:
    import html as html_lib

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    parts = []
    for s in report["scenarios"]:
        fig = make_subplots(
            rows=1, cols=3, subplot_titles=("round latency (s)", "eval loss (bench scale)", "efficiency")
        )
        for p, series in s["latency_series"].items():
            fig.add_trace(go.Scatter(y=series, name=p, legendgroup=p), row=1, col=1)
            fig.add_trace(
                go.Scatter(y=s["eval_loss"][p], name=p, legendgroup=p, showlegend=False), row=1, col=2
            )
        fig.add_trace(
            go.Bar(
                x=list(s["figures"]), y=[f["efficiency"] for f in s["figures"].values()], showlegend=False
            ),
            row=1,
            col=3,
        )
        fig.update_layout(title=f"{s['scenario']} (target eval loss {s['target_eval_loss']:.3f})", height=420)
        parts.append(fig)
    sweep = report["v_sweep"]
    fig = go.Figure()
    for key, label in (("mean_latency_s", "latency T"), ("mean_penalty_s", "penalty T + λ·G")):
        fig.add_trace(
            go.Scatter(
                x=[r["mean_backlog"] for r in sweep],
                y=[r[key] for r in sweep],
                mode="lines+markers+text",
                name=label,
                text=[f"V={r['V']:g}" for r in sweep],
                textposition="top center",
            )
        )
    fig.update_layout(
        title="DSSDA V sweep (paper-transformer): latency and penalty against backlog",
        xaxis_title="mean virtual queue (J)",
        xaxis_type="log",
        yaxis_title="seconds",
        height=420,
    )
    parts.append(fig)
    html = [
        "<html><head><meta charset='utf-8'><title>CollaPipe paper comparison</title></head><body>",
        "<h1>CollaPipe: DSSDA against the baselines</h1>",
        HTML_NOTE,
        f"<pre>{html_lib.escape(headline_table(report))}</pre>",
    ]
    for i, part in enumerate(parts):
        html.append(part.to_html(full_html=False, include_plotlyjs=(i == 0)))  # plotly.js inlined once
    html.append(f"<pre>{html_lib.escape(json.dumps(report['summary'], indent=2, default=float))}</pre>")
    html.append("</body></html>")
    path.write_text("\n".join(html), encoding="utf-8")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="collapipe bench paper", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=60, help="analytic rounds per policy and per V")
    parser.add_argument(
        "--train-rounds", type=int, default=10, help="rounds uniform trains to set the target"
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
    if args.train_rounds > args.rounds:
        parser.error(f"--train-rounds ({args.train_rounds}) must not exceed --rounds ({args.rounds})")
    started = time.perf_counter()
    scenarios, sweep = compare(args.rounds, args.train_rounds, args.workers)
    report: dict[str, Any] = {
        "scenarios": scenarios,
        "v_sweep": sweep,
        "decision_time": decision_times(
            tuple(int(d) for d in args.decision_devices.split(",")), (6, 12, 24, 48), repeats=5
        ),
    }
    report["summary"] = {
        "paper_claims": PAPER_CLAIMS,
        "scales": {
            "modeled": "the examples' own model sizes",
            "training": {**TRAINING_SCALE, "training.lr": TRAINING_LR},
        },
        "ours": {
            s["scenario"]: {
                "target_eval_loss": s["target_eval_loss"],
                "ratios_dssda_to": ratios_to_dssda(s["figures"]),
                "memory_ratio_dssda_to_fl": s["figures"]["dssda"]["memory_ratio_to_fl"],
                "mean_memory_ratio_dssda_to_fl": s["figures"]["dssda"]["mean_memory_ratio_to_fl"],
                "energy_over_budget_max": {p: f["energy_over_budget_max"] for p, f in s["figures"].items()},
                "time_to_target_s": {p: f["time_to_target_s"] for p, f in s["figures"].items()},
            }
            for s in scenarios
        },
        "v_sweep": sweep,
        "decision_time": report["decision_time"],
        "wall_time_s": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "paper.csv", scenarios)
    write_html(args.out / "paper.html", report)
    (args.out / "paper.json").write_text(json.dumps(report["summary"], indent=2, default=float))
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
