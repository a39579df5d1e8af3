"""The paper's headline comparison: DSSDA against every baseline on the same seeded trace.

For the Transformer and the BERT scenarios of ``examples/`` (at bench scale, see ``BENCH_SCALE``):

1. modeled figures over ``--rounds`` analytic rounds per policy: mean round latency, computation
   efficiency = Σ device compute time / (devices × round latency), peak device memory (and its ratio to
   ``fl``), time-average energy per device against its budget;
2. end-to-end latency to a target eval loss with real training (simulated executor): every policy's
   decisions are replayed by the trainer; the target is the eval loss ``uniform`` reaches at
   ``--train-rounds`` (so every policy is compared on the same bar), and a policy's time to target is
   the sum of its modeled round latencies until its own eval loss reaches it. Policies whose decisions
   train identically (same micro-batch counts every round: the partition does not change the
   gradient) share one training run, which the bench checks on their M sequences;
3. a V sweep of DSSDA: average latency against average virtual-queue backlog;
4. DSSDA's decision time against the number of devices and of encoder blocks.

Writes ``paper.csv`` and a self-contained ``paper.html`` (plotly.js inlined) to ``--out`` and prints a
JSON summary (one line with ``--json``, indented otherwise).
Run: ``collapipe bench paper [--json] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

from collapipe_core.config import ExperimentConfig
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.scheduler import get_policy
from collapipe_core.sinks import MemorySink
from collapipe_core.state import build_environment, observe
from collapipe_core.validation import load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {
    "transformer": ROOT / "examples" / "paper-transformer.yaml",
    "bert": ROOT / "examples" / "paper-bert.yaml",
}
POLICIES = ("dssda", "uniform", "proportional", "random", "fl", "split", "myopic")
BENCH_SCALE = {
    "model.d_model": 64,
    "model.ffn_dim": 256,
    "data.eval_samples": 256,
    "training.local_iterations": 1,
}
PAPER_CLAIMS = {"latency_reduction_pct": 48.98, "efficiency_gain_pct": 15.09, "memory_ratio_to_fl": 0.5}


def scenario_config(path: Path, **overrides: Any) -> ExperimentConfig:
    return load_config(path, {**BENCH_SCALE, **overrides})


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


def modeled_figures(results: list[RoundResult]) -> dict[str, float]:
    latency = [r.round.latency_s for r in results]
    compute = [sum(d.compute_s for d in r.devices) for r in results]
    devices = len(results[0].devices)
    energy_ratio: dict[str, list[float]] = {}
    for r in results:
        for d in r.devices:
            energy_ratio.setdefault(d.device_id, []).append(d.energy_j / d.energy_budget_j)
    per_device = [statistics.fmean(v) for v in energy_ratio.values()]
    return {
        "mean_latency_s": statistics.fmean(latency),
        "efficiency": statistics.fmean(c / (devices * t) for c, t in zip(compute, latency, strict=True)),
        "peak_memory_bytes": max(d.memory_bytes for r in results for d in r.devices),
        "energy_over_budget_max": max(per_device),
        "energy_over_budget_mean": statistics.fmean(per_device),
        "infeasible_rounds": sum(not r.round.feasible for r in results),
    }


def time_to_target(
    latencies: list[float], losses: list[float], target: float
) -> tuple[float | None, int | None]:
    elapsed = 0.0
    for i, (latency, loss) in enumerate(zip(latencies, losses, strict=False)):
        elapsed += latency
        if loss <= target:
            return elapsed, i + 1
    return None, None


def compare_scenario(path: Path, rounds: int, train_rounds: int) -> dict[str, Any]:
    config = scenario_config(path)
    analytic = {p: run_policy(config, p, rounds, "analytic") for p in POLICIES}
    figures = {p: modeled_figures(r) for p, r in analytic.items()}
    fl_memory = figures["fl"]["peak_memory_bytes"]
    for f in figures.values():
        f["memory_ratio_to_fl"] = f["peak_memory_bytes"] / fl_memory
    # real training: one run per distinct micro-batch trajectory over the first train_rounds
    trajectories: dict[tuple[tuple[int, ...], ...], list[str]] = {}
    for p, results in analytic.items():
        key = tuple(tuple(r.round.num_microbatches) for r in results[:train_rounds])
        trajectories.setdefault(key, []).append(p)
    losses: dict[str, list[float]] = {}
    for group in trajectories.values():
        trained = run_policy(config, group[0], train_rounds, "simulated")
        for p in group:
            losses[p] = [float(r.round.eval_loss or 0.0) for r in trained]
    target = losses["uniform"][-1]
    for p in POLICIES:
        latencies = [r.round.latency_s for r in analytic[p][:train_rounds]]
        figures[p]["time_to_target_s"], figures[p]["rounds_to_target"] = time_to_target(
            latencies, losses[p], target
        )
        figures[p]["final_eval_loss"] = losses[p][-1]
    return {
        "scenario": path.stem,
        "target_eval_loss": target,
        "training_groups": list(trajectories.values()),
        "figures": figures,
        "eval_loss": losses,
        "latency_series": {p: [r.round.latency_s for r in res] for p, res in analytic.items()},
    }


def ratios_to_dssda(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    d = figures["dssda"]
    out: dict[str, dict[str, float | None]] = {}
    for p, f in figures.items():
        if p == "dssda":
            continue
        ttt = d["time_to_target_s"], f["time_to_target_s"]
        out[p] = {
            "latency_ratio": d["mean_latency_s"] / f["mean_latency_s"],
            "time_to_target_ratio": ttt[0] / ttt[1] if ttt[0] and ttt[1] else None,
            "efficiency_ratio": d["efficiency"] / f["efficiency"] if f["efficiency"] > 0 else None,
        }
    return out


def v_sweep(path: Path, rounds: int, values: tuple[float, ...]) -> list[dict[str, float]]:
    rows = []
    for v in values:
        config = scenario_config(path, **{"scheduler.V": v})
        results = run_policy(config, "dssda", rounds, "analytic")
        backlog = statistics.fmean(statistics.fmean(d.queue for d in r.devices) for r in results)
        rows.append(
            {
                "V": v,
                "mean_latency_s": statistics.fmean(r.round.latency_s for r in results),
                "mean_backlog": backlog,
            }
        )
    return rows


def decision_times(devices: tuple[int, ...], blocks: tuple[int, ...], repeats: int) -> list[dict[str, float]]:
    rows = []
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
                    "model": {"num_encoder_blocks": num_blocks, "d_model": 64, "ffn_dim": 256},
                    "data": {"dataset": "synthetic-reverse", "samples_per_cluster": 64, "eval_samples": 16},
                }
            )
            env = build_environment(config, 12, 12)
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


def write_csv(path: Path, scenarios: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        keys = [
            "mean_latency_s",
            "efficiency",
            "peak_memory_bytes",
            "memory_ratio_to_fl",
            "energy_over_budget_max",
            "energy_over_budget_mean",
            "time_to_target_s",
            "rounds_to_target",
            "final_eval_loss",
            "infeasible_rounds",
        ]
        writer.writerow(["scenario", "policy", *keys])
        for s in scenarios:
            for p, f in s["figures"].items():
                writer.writerow([s["scenario"], p, *(f[k] for k in keys)])


def write_html(path: Path, report: dict[str, Any]) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    parts = []
    for s in report["scenarios"]:
        fig = make_subplots(rows=1, cols=3, subplot_titles=("round latency (s)", "eval loss", "efficiency"))
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
    sweep = go.Figure(
        go.Scatter(
            x=[r["mean_backlog"] for r in report["v_sweep"]],
            y=[r["mean_latency_s"] for r in report["v_sweep"]],
            mode="lines+markers+text",
            text=[f"V={r['V']:g}" for r in report["v_sweep"]],
            textposition="top center",
        )
    )
    sweep.update_layout(
        title="DSSDA V sweep: latency against backlog",
        xaxis_title="mean virtual queue",
        yaxis_title="mean round latency (s)",
        height=420,
    )
    parts.append(sweep)
    html = [
        "<html><head><meta charset='utf-8'><title>CollaPipe paper comparison</title></head><body>",
        "<h1>CollaPipe: DSSDA against the baselines</h1>",
        f"<pre>{json.dumps(report['summary'], indent=2)}</pre>",
    ]
    for i, fig in enumerate(parts):
        html.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))  # plotly.js inlined once
    html.append("</body></html>")
    path.write_text("\n".join(html), encoding="utf-8")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="collapipe bench paper", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="analytic rounds per policy")
    parser.add_argument("--train-rounds", type=int, default=20, help="simulated (training) rounds")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    scenarios = [compare_scenario(path, args.rounds, args.train_rounds) for path in SCENARIOS.values()]
    report: dict[str, Any] = {
        "scenarios": scenarios,
        "v_sweep": v_sweep(SCENARIOS["transformer"], args.rounds, (0.1, 1.0, 10.0, 100.0, 1000.0)),
        "decision_time": decision_times((4, 12, 50, 100, 1000), (6, 12, 24, 48), repeats=5),
    }
    report["summary"] = {
        "paper_claims": PAPER_CLAIMS,
        "ours": {
            s["scenario"]: {
                "ratios_dssda_to": ratios_to_dssda(s["figures"]),
                "memory_ratio_dssda_to_fl": s["figures"]["dssda"]["memory_ratio_to_fl"],
                "energy_over_budget_max": {p: f["energy_over_budget_max"] for p, f in s["figures"].items()},
            }
            for s in scenarios
        },
        "v_sweep": report["v_sweep"],
        "decision_time": report["decision_time"],
        "wall_time_s": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "paper.csv", scenarios)
    write_html(args.out / "paper.html", report)
    (args.out / "paper.json").write_text(json.dumps(report["summary"], indent=2, default=float))
    print(json.dumps(report["summary"], indent=None if args.json else 2, default=float))
    return report


if __name__ == "__main__":
    main()
