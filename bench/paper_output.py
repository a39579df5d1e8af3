"""The paper comparison's outputs: the headline table, paper.csv, paper-seeds.csv and paper.html
(bench/paper.py computes the figures; docs/paper-comparison.md explains them)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from bench.paper_seeds import PAPER_CLAIMS, READING_TITLES, seeds_table

__all__ = ["PAPER_CLAIMS", "headline_table", "ratios_to_dssda", "write_csv", "write_html", "write_seeds_csv"]


def ratios_to_dssda(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    d = figures["dssda"]
    out: dict[str, dict[str, float | None]] = {}
    for p in (p for p in figures if p != "dssda"):
        f = figures[p]
        ttt = d["time_to_target_s"], f["time_to_target_s"]
        out[p] = {
            "latency_ratio": d["mean_latency_s"] / f["mean_latency_s"],
            "latency_per_sample_ratio": d["latency_per_sample_s"] / f["latency_per_sample_s"],
            "time_to_target_ratio": ttt[0] / ttt[1] if ttt[0] and ttt[1] else None,
            "efficiency_ratio": d["efficiency"] / f["efficiency"] if f["efficiency"] > 0 else None,
            "efficiency_holders_ratio": (
                d["efficiency_holders"] / f["efficiency_holders"] if f["efficiency_holders"] > 0 else None
            ),
        }
    return out


CSV_KEYS = [
    "mean_latency_s",
    "latency_per_sample_s",
    "mean_samples_per_round",
    "mean_microbatches",
    "efficiency",
    "efficiency_holders",
    "peak_memory_bytes",
    "memory_ratio_to_fl",
    "mean_memory_bytes",
    "mean_memory_ratio_to_fl",
    "energy_over_budget_max",
    "energy_over_budget_mean",
    "time_to_target_s",
    "rounds_to_target",
    "trained_rounds",
    "elapsed_trained_s",
    "final_eval_loss",
    "infeasible_rounds",
    "mean_blocks_moved",
    "moves_latency_share",
]


def write_csv(path: Path, scenarios: list[dict[str, Any]]) -> None:
    """One row per reading, scenario, seed and policy."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["reading", "scenario", "seed", "gradient_noise_scale", "policy", *CSV_KEYS])
        for s in scenarios:
            for p, f in s["figures"].items():
                writer.writerow(
                    [
                        s["reading"],
                        s["scenario"],
                        s["seed"],
                        s["gradient_noise_scale"],
                        p,
                        *(f[k] for k in CSV_KEYS),
                    ]
                )


def write_seeds_csv(path: Path, aggregated: list[dict[str, Any]]) -> None:
    """One row per reading, scenario and policy: the figures over seeds (bench/paper_seeds.py)."""
    columns = ["mean", "low", "high", "n", "lower_bound"]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "reading",
                "scenario",
                "policy",
                "seeds",
                *(f"time_to_target_s_{c}" for c in columns),
                "not_reached_seeds",
                *(f"rounds_to_target_{c}" for c in ("mean", "low", "high", "n")),
                "mean_latency_s",
                "mean_microbatches",
                "energy_over_budget_max_worst_seed",
                "holds_budgets",
                "budget_held_seeds",
                *(f"dssda_ratio_{c}" for c in columns),
            ]
        )
        for s in aggregated:
            for p, f in s["policies"].items():
                ratio = s["ratios_dssda_to"].get(p)
                writer.writerow(
                    [
                        s["reading"],
                        s["scenario"],
                        p,
                        " ".join(map(str, s["seeds"])),
                        *(f["time_to_target_s"][c] for c in columns),
                        " ".join(map(str, f["not_reached_seeds"])),
                        *(f["rounds_to_target"][c] for c in ("mean", "low", "high", "n")),
                        f["mean_latency_s"]["mean"],
                        f["mean_microbatches"]["mean"],
                        f["energy_over_budget_max_worst_seed"],
                        f["holds_budgets"],
                        " ".join(map(str, f["budget_held_seeds"])),
                        *((ratio[c] for c in columns) if ratio else [None] * len(columns)),
                    ]
                )


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def headline_table(report: dict[str, Any]) -> str:
    """The readable summary: per reading and scenario of the first seed, DSSDA against each baseline,
    then each policy's own figures; the V sweep and decision times if they ran; the figures over seeds
    with the paper's claims."""
    lines = []
    first = report["scenarios"][0]["seed"]
    for s in report["scenarios"]:
        if s["seed"] != first:
            continue
        figs, ratios = s["figures"], ratios_to_dssda(s["figures"])
        noise = s["gradient_noise_scale"]
        lines.append(
            f"== {READING_TITLES[s['reading']]}: {s['scenario']} seed {s['seed']}"
            f"  (target eval loss {s['target_eval_loss']:.3f},"
            " bench-scale training; convergence term "
            + (f"noise_scale, B_noise {noise:.2f})" if noise is not None else f"{s['convergence']})")
        )
        lines.append("DSSDA / baseline   round-latency  per-sample  to-target  efficiency  eff_holders")
        for p, r in ratios.items():
            lines.append(
                f"  {p:14s}  {_fmt(r['latency_ratio']):>13s}  {_fmt(r['latency_per_sample_ratio']):>10s}"
                f"  {_fmt(r['time_to_target_ratio']):>9s}  {_fmt(r['efficiency_ratio']):>10s}"
                f"  {_fmt(r['efficiency_holders_ratio']):>11s}"
            )
        lines.append(
            "policy          latency_s  s/sample   M    eff  eff_h  peak_GB mean_GB  peak/fl mean/fl  E/Ē_max"
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
                f"  {f['mean_microbatches']:4.1f}  {f['efficiency']:.3f}  {f['efficiency_holders']:.3f}"
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
            + (
                f"; dssda blind to moves {blind['mean_blocks_moved']:.2f}"
                f" ({100 * blind['moves_latency_share']:.1f} %, latency {blind['mean_latency_s']:.1f} s,"
                f" E/Ē_max {blind['energy_over_budget_max']:.2f})"
                if blind
                else ""
            )
        )
    if report["v_sweep"]:
        reading = READING_TITLES[report["scenarios"][0]["reading"]]
        lines.append(f"== V sweep (DSSDA, {reading}: paper-transformer seed {first})")
        lines.append("       V  latency_s  penalty_s     M  mean_backlog_J  max_device_backlog_J  E/Ē_max")
        for r in report["v_sweep"]:
            lines.append(
                f"  {r['V']:6g}  {r['mean_latency_s']:9.1f}  {r['mean_penalty_s']:9.1f}"
                f"  {r['mean_microbatches']:4.1f}  {r['mean_backlog']:14.1f}"
                f"  {r['max_device_backlog']:20.1f}  {r['energy_over_budget_max']:7.2f}"
            )
    dt = report["decision_time"]
    if dt:
        lines.append("== DSSDA decision time (median ms; rows: blocks, columns: devices)")
        devices = sorted({int(r["devices"]) for r in dt})
        lines.append("  blocks " + "".join(f"{d:>9d}" for d in devices))
        for b in sorted({int(r["blocks"]) for r in dt}):
            row = {int(r["devices"]): r["median_ms"] for r in dt if int(r["blocks"]) == b}
            lines.append(f"  {b:6d} " + "".join(f"{row[d]:9.1f}" for d in devices))
    if len(report["over_seeds"][0]["seeds"]) > 1:
        lines.append(seeds_table(report["over_seeds"], PAPER_CLAIMS))
    lines.append(
        f"paper: ≥ {PAPER_CLAIMS['latency_reduction_pct']}% lower latency, up to +"
        f"{PAPER_CLAIMS['efficiency_gain_pct']}% efficiency, device memory"
        f" < {PAPER_CLAIMS['memory_ratio_to_fl']} × fl"
    )
    lines.append(f"wall time {report['summary']['wall_time_s']:.0f} s")
    return "\n".join(lines)


HTML_NOTE = (
    "<p>Two readings of micro-batching: a fixed batch B split into M micro-batches (the scenarios as "
    "written) and fixed micro-batches of B/4 samples (a step trains M of them). Modeled figures "
    "(latency, efficiency, memory, energy) come from the cost model at the scenarios' own sizes "
    "(Transformer-big and BERT-base widths, examples/). Eval losses come from really training a "
    "bench-scale copy (d_model 64, same data, blocks, batch, local iterations): with a fixed batch every "
    "policy trains uniform's trajectory, with a fixed micro-batch the copy replays each policy's "
    "micro-batch counts; time to target adds the modeled full-size round latencies until the copy's "
    "eval loss reaches the target. See docs/paper-comparison.md.</p>"
)


def write_html(path: Path, report: dict[str, Any]) -> None:
    import html as html_lib

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    parts = []
    first = report["scenarios"][0]["seed"]
    for s in (s for s in report["scenarios"] if s["seed"] == first):
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
        fig.update_layout(
            title=f"{READING_TITLES[s['reading']]}: {s['scenario']} seed {s['seed']}"
            f" (target eval loss {s['target_eval_loss']:.3f})",
            height=420,
        )
        parts.append(fig)
    for a in report["over_seeds"] if len(report["over_seeds"][0]["seeds"]) > 1 else []:
        times = {p: f["time_to_target_s"] for p, f in a["policies"].items()}
        fig = go.Figure(
            go.Bar(
                x=list(times),
                y=[t["mean"] for t in times.values()],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [0.0 if t["high"] is None else t["high"] - t["mean"] for t in times.values()],
                    "arrayminus": [0.0 if t["low"] is None else t["mean"] - t["low"] for t in times.values()],
                },
                text=["≥ (lower bound)" if t["lower_bound"] else "" for t in times.values()],
            )
        )
        fig.update_layout(
            title=f"{READING_TITLES[a['reading']]}: {a['scenario']}: mean time to target over seeds"
            f" {a['seeds']} (Student-t 95 % intervals)",
            yaxis_title="seconds",
            height=420,
        )
        parts.append(fig)
    sweep = report["v_sweep"] or []
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
    if sweep:
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
