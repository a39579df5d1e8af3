"""The cost model's per-micro-batch stage times against the ``distributed`` executor's measured ones.

One cluster, bench/distributed.py's pipeline: CU → c0-d0 (4 TEBs) → c0-d1 (0 TEBs, sits out) → c0-d2
(2 TEBs) → edge server, M = 4 micro-batches, GPipe, one torch thread per rank, instant (localhost gloo)
links. Two models of the same size (d = 128, h = 4, f = 512, s = 64, 6 blocks): the builtin classifier
of bench/distributed.py and a Hugging Face llama (causal LM, LM head over the pydoc-topics vocabulary).
Per model, one pool of ranks runs a warm-up round, then one round per micro-batch size b (1, 4, 16) of
I local iterations.

Measured, per stage and b: the median over the micro-batches of iterations ≥ 1 (the first iteration
carries the pipeline's warm-up) of each micro-batch's forward and backward compute, in CPU time of the
rank's thread. The ranks share the host's cores with each other and with other jobs, so their wall time
also holds the wait for a core, which a device with a processor of its own does not have; the table
shows the wall time's factor over the CPU time beside it. The edge server's forward includes its loss
(timed apart by the executor, shown on its own too: the model counts no FLOP for it).

Calibration (same host, same runs): the devices' forward times t(b, δ) = δ·(b·Φ_F + Φ_0)/F give F (the
effective FLOP/s of one torch thread) and Φ_0 (``network.block_overhead_flops``, the fixed work of a TEB's
pass per micro-batch in FLOPs) by least squares on the relative error over b and both devices; the backward
times δ·(b·Φ_B + Φ_0B)/F at that F give Φ_0B (``network.block_backward_overhead_flops``). The cost model is
then built with every device, the CU and the edge server at F (``network.profiles`` with ``cpu_hz`` F and
``flops_per_cycle`` 1, ``cu_flops_per_s`` and ``edge_flops_per_s`` F) and the fixed work, and
:func:`collapipe_core.costmodel.closed_form.stage_times` gives every stage's modeled forward and backward
time at each b. Goal: modeled/measured within ±25 %. Also printed: one calibration fitted to both models at
once. Links are not compared:
localhost gloo has no radio, and link emulation would delay each transfer by the model's own formula.

    .venv/bin/python bench/stage_times.py [--iterations 5] [--models builtin llama] [--json out.json]
    .venv/bin/python bench/stage_times.py --reuse out.json   # the analysis again on earlier measurements
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.distributed import MICROBATCHES, SEGMENTS, _decision, scenario  # noqa: E402
from collapipe_core.costmodel import ModelProfile, build_problem, build_profile  # noqa: E402
from collapipe_core.costmodel.closed_form import stage_times  # noqa: E402
from collapipe_core.data import load_dataset  # noqa: E402
from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions  # noqa: E402
from collapipe_core.state import RoundState, build_environment, observe  # noqa: E402
from collapipe_core.validation import parse_config  # noqa: E402

MICROBATCH_SIZES = (1, 4, 16)
Measured = dict[int, dict[str, dict[str, float]]]  # b -> participant -> figure -> seconds
GOAL = 0.25  # |modeled/measured − 1|
LLAMA = {
    "source": "transformers",
    "architecture": "llama",
    "kind": "causal_lm",
    "d_model": 128,
    "num_heads": 4,
    "ffn_dim": 512,
    "num_blocks": sum(SEGMENTS),
    "seq_len": 64,
    "dropout": 0.0,
}


def experiment(model: str, iterations: int, network: dict[str, Any] | None = None) -> dict[str, Any]:
    """bench/distributed.py's scenario (the builtin classifier) or the same pipeline with llama."""
    config = scenario(iterations)
    if model == "llama":
        config["model"] = dict(LLAMA)
        config["data"] = {**config["data"], "dataset": "pydoc-topics"}
    if network:
        config["network"] = {**config["network"], **network}
    return config


def participants() -> list[tuple[str, int]]:
    """(participant, TEBs) in chain order; the CU and the edge server hold none."""
    devices = [(f"c0-d{k}", blocks) for k, blocks in enumerate(SEGMENTS) if blocks]
    return [("c0-cu", 0), *devices, ("c0-edge", 0)]


def with_microbatch(state: RoundState, b: int, round_index: int) -> RoundState:
    env = state.env
    settings = dataclasses.replace(env.settings, microbatch_size=b, batch_size=None)
    return observe(dataclasses.replace(env, settings=settings), round_index)


def measure(model: str, iterations: int) -> Measured:
    """Per b and participant, medians over the micro-batches of iterations ≥ 1 (seconds): ``forward_s``,
    ``backward_s`` and the edge server's ``loss_s`` in CPU time of the rank's thread, and the same in
    wall time (``*_wall_s``)."""
    config = parse_config(experiment(model, iterations))
    bundle = load_dataset(config)
    base = observe(build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None), 0)
    options = DistributedOptions(track_tensor_bytes=False)
    out: Measured = {}
    with DistributedExecutor(config, bundle, options) as executor:
        rounds = [max(MICROBATCH_SIZES), *MICROBATCH_SIZES]  # a warm-up round first
        for t, b in enumerate(rounds):
            state = with_microbatch(base, b, t)
            executor.execute(state, _decision(state))
            if t == 0:
                continue
            out[b] = {}
            for name, _ in participants():
                details = executor.last_details[name]
                figures = {}
                for part in ("forward", "backward", "loss"):
                    cpu, wall = details[f"{part}_cpu_chunks_s"], details[f"{part}_chunks_s"]
                    if cpu:  # the loss: the edge server only
                        figures[f"{part}_s"] = statistics.median(cpu[MICROBATCHES:])
                        figures[f"{part}_wall_s"] = statistics.median(wall[MICROBATCHES:])
                out[b][name] = figures
    return out


def profile(model: str) -> ModelProfile:
    """The cost model's profile of the model (its measured FLOPs per sample)."""
    config = parse_config(experiment(model, 2))
    bundle = load_dataset(config)
    return build_profile(config, bundle.src_vocab_size, bundle.tgt_vocab_size)


def measured_backward_ratio(measured: Measured) -> tuple[float, float]:
    """The device stages' measured backward/forward (smallest, largest over b and devices)."""
    ratios = [
        stages[name]["backward_s"] / stages[name]["forward_s"]
        for stages in measured.values()
        for name, blocks in participants()
        if blocks
    ]
    return round(min(ratios), 3), round(max(ratios), 3)


def calibrate(runs: list[tuple[Measured, ModelProfile]]) -> tuple[float, float, float]:
    """(F, Φ_0, Φ_0B) from the devices' CPU times of (measured, profile) runs: the forward times
    t = δ·(b·Φ_F + Φ_0)/F by least squares on t_model/t − 1 (every b weighs alike; Φ_0 = 0 when the free fit
    puts it below 0), then the backward times δ·(b·Φ_B + Φ_0B)/F at that F likewise."""
    rows, times, backward = [], [], []
    for measured, prof in runs:
        for b, stages in measured.items():
            for name, blocks in participants():
                if blocks:
                    # the coefficients of Φ_0/F and 1/F; of Φ_0B/F (the backward's b·Φ_B/F known at F)
                    rows.append([blocks, blocks * b * prof.block_forward_flops])
                    times.append(stages[name]["forward_s"])
                    backward.append(
                        (blocks, blocks * b * prof.block_backward_flops, stages[name]["backward_s"])
                    )
    a, t = np.asarray(rows) / np.asarray(times)[:, None], np.ones(len(times))
    (fixed_s, inverse_f), *_ = np.linalg.lstsq(a, t, rcond=None)
    if fixed_s < 0:
        (inverse_f,), *_ = np.linalg.lstsq(a[:, 1:], t, rcond=None)
        fixed_s = 0.0
    flops_per_s = 1.0 / float(inverse_f)
    # backward: minimise Σ (δ·(bΦ_B + x)/(F·t) − 1)² over x
    coef = np.array([blocks / (flops_per_s * t_b) for blocks, _, t_b in backward])
    rest = np.array([1.0 - work / (flops_per_s * t_b) for _, work, t_b in backward])
    fixed_b = max(float(coef @ rest / (coef @ coef)), 0.0)
    return flops_per_s, float(fixed_s) * flops_per_s, fixed_b


def calibrated_network(flops_per_s: float, fixed: float, fixed_backward: float) -> dict[str, Any]:
    """Every device, the CU and the edge server at F; Φ_0 and Φ_0B per TEB per micro-batch."""
    profile = {
        "name": "host-thread",
        "cpu_hz": flops_per_s,
        "flops_per_cycle": 1.0,
        "memory_bytes": 2**36,
        "max_power_w": 0.2,
        "energy_budget_j": 5.0,
    }
    return {
        "profiles": [profile],
        "cu_flops_per_s": flops_per_s,
        "edge_flops_per_s": flops_per_s,
        "block_overhead_flops": fixed,
        "block_backward_overhead_flops": fixed_backward,
    }


def modeled(model: str, calibration: tuple[float, float, float]) -> Measured:
    """Per b and participant, the cost model's forward and backward time per micro-batch (seconds) at the
    calibration (F, Φ_0, Φ_0B)."""
    config = parse_config(experiment(model, 2, calibrated_network(*calibration)))
    bundle = load_dataset(config)
    base = observe(build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None), 0)
    out: Measured = {}
    for b in MICROBATCH_SIZES:
        state = with_microbatch(base, b, 0)
        decision = _decision(state)
        pr = build_problem(state)
        u = pr.time_per_bit(decision.bandwidth_share(), decision.power_w())
        times = stage_times(pr, decision.num_blocks(), decision.num_microbatches(), u)
        out[b] = {
            "c0-cu": {"forward_s": float(times.cu_forward_s[0]), "backward_s": float(times.cu_backward_s[0])},
            "c0-edge": {
                "forward_s": float(times.edge_forward_s[0]),
                "backward_s": float(times.edge_backward_s[0]),
            },
        }
        for k, blocks in enumerate(SEGMENTS):
            if blocks:
                out[b][f"c0-d{k}"] = {
                    "forward_s": float(times.device_forward_s[0, k]),
                    "backward_s": float(times.device_backward_s[0, k]),
                }
    return out


def compare(measured: Measured, model: Measured) -> list[dict[str, Any]]:
    """One row per b and stage: measured (CPU) and modeled times, modeled/measured, and the wall time's
    factor over the CPU time. The edge server's measured forward includes its loss."""
    rows = []
    for b in MICROBATCH_SIZES:
        for name, blocks in participants():
            got, want = measured[b][name], model[b][name]
            row: dict[str, Any] = {"b": b, "stage": name, "blocks": blocks}
            for part in ("forward", "backward"):
                cpu, wall = got[f"{part}_s"], got[f"{part}_wall_s"]
                if part == "forward" and "loss_s" in got:
                    cpu, wall = cpu + got["loss_s"], wall + got["loss_wall_s"]
                row[f"{part}_measured_ms"] = round(1e3 * cpu, 3)
                row[f"{part}_modeled_ms"] = round(1e3 * want[f"{part}_s"], 3)
                row[f"{part}_ratio"] = round(want[f"{part}_s"] / cpu, 3)
                row[f"{part}_wall_over_cpu"] = round(wall / cpu, 2)
            if "loss_s" in got:
                row["loss_measured_ms"] = round(1e3 * got["loss_s"], 3)
            row["within_goal"] = all(
                abs(row[f"{part}_ratio"] - 1.0) <= GOAL for part in ("forward", "backward")
            )
            rows.append(row)
    return rows


def print_table(model: str, result: dict[str, Any]) -> None:
    fit = result["calibration"]
    low, high = fit["backward_ratio_measured"]
    keys = ("flops_per_s", "block_overhead_flops", "block_backward_overhead_flops")
    flops_per_s, fixed, fixed_b = (fit[k] for k in keys)
    print(
        f"\n{model}: F = {flops_per_s / 1e9:.1f} GFLOP/s, Φ_0 = {fixed / 1e6:.2f} MFLOPs "
        f"({1e3 * fixed / flops_per_s:.3f} ms at F), Φ_0B = {fixed_b / 1e6:.2f} MFLOPs; "
        f"Φ_F = {fit['block_forward_flops'] / 1e6:.1f} MFLOPs per sample and TEB; "
        f"Φ_B/Φ_F = {fit['backward_ratio_profile']:.2f}, measured backward/forward {low:.2f}..{high:.2f}"
    )
    print(
        "CPU ms per micro-batch; ratio = modeled/measured; wall/cpu: the measured wall time over the CPU time"
    )
    print(
        f"{'b':>3} {'stage':<10} {'fwd meas':>9} {'model':>9} {'ratio':>6}  {'bwd meas':>9} {'model':>9} "
        f"{'ratio':>6}  {'loss':>6}  {'wall/cpu f, b':>13}"
    )
    for row in result["rows"]:
        stage = row["stage"] + (f" ({row['blocks']})" if row["blocks"] else "")
        loss = f"{row['loss_measured_ms']:6.2f}" if "loss_measured_ms" in row else " " * 6
        forward = [row[f"forward_{key}"] for key in ("measured_ms", "modeled_ms", "ratio")]
        backward = [row[f"backward_{key}"] for key in ("measured_ms", "modeled_ms", "ratio")]
        print(
            f"{row['b']:>3} {stage:<10} {forward[0]:9.3f} {forward[1]:9.3f} {forward[2]:6.2f}  "
            f"{backward[0]:9.3f} {backward[1]:9.3f} {backward[2]:6.2f}  {loss}  "
            f"{row['forward_wall_over_cpu']:6.2f} {row['backward_wall_over_cpu']:6.2f}"
        )


def worst_device_ratio(measured: Measured, model: Measured) -> float:
    """The device stages' modeled/measured farthest from 1, forward and backward."""
    ratios = [
        model[b][name][f"{part}_s"] / measured[b][name][f"{part}_s"]
        for b in MICROBATCH_SIZES
        for name, blocks in participants()
        if blocks
        for part in ("forward", "backward")
    ]
    return farthest(ratios)


def farthest(ratios: list[float]) -> float:
    """The ratio farthest from 1."""
    worst: float = max(ratios, key=lambda r: abs(r - 1.0))
    return round(worst, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=5, help="local iterations per round (≥ 2)")
    parser.add_argument("--models", nargs="+", choices=["builtin", "llama"], default=["builtin", "llama"])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--reuse", type=Path, help="take the measured times from an earlier --json file instead of running"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    reused = json.loads(args.reuse.read_text()) if args.reuse else {}
    earlier = reused.get("models", {})
    runs: dict[str, tuple[Measured, ModelProfile]] = {}
    for name in args.models:
        if name in earlier:
            measured = {int(b): stages for b, stages in earlier[name]["measured"].items()}
        else:
            measured = measure(name, max(args.iterations, 2))
        runs[name] = (measured, profile(name))
    results: dict[str, Any] = {}
    for name, (measured, prof) in runs.items():
        phi, phi_backward = prof.block_forward_flops, prof.block_backward_flops
        calibration = calibrate([(measured, prof)])
        flops_per_s, fixed, fixed_backward = calibration
        results[name] = {
            "calibration": {
                "flops_per_s": flops_per_s,
                "block_overhead_flops": fixed,
                "block_backward_overhead_flops": fixed_backward,
                "block_forward_flops": phi,
                "overhead_samples": fixed / phi,
                "backward_ratio_profile": phi_backward / phi,
                "backward_ratio_measured": measured_backward_ratio(measured),
            },
            "rows": compare(measured, modeled(name, calibration)),
            "measured": measured,
        }
        print_table(name, results[name])
    pooled: dict[str, Any] = {}
    if len(runs) > 1:  # one (F, c_0) for the host, whatever the model
        calibration = calibrate(list(runs.values()))
        worst = {name: worst_device_ratio(m, modeled(name, calibration)) for name, (m, _) in runs.items()}
        pooled = {
            "flops_per_s": calibration[0],
            "block_overhead_flops": calibration[1],
            "block_backward_overhead_flops": calibration[2],
            "worst_device_ratio": worst,
        }
        print(
            f"\none fit for both models: F = {calibration[0] / 1e9:.1f} GFLOP/s, "
            f"Φ_0 = {calibration[1] / 1e6:.2f} MFLOPs, Φ_0B = {calibration[2] / 1e6:.2f} MFLOPs; "
            f"worst device-stage ratio {worst}"
        )
    out = {
        "scenario": {
            "segments": SEGMENTS,
            "num_microbatches": MICROBATCHES,
            "microbatch_sizes": list(MICROBATCH_SIZES),
            "local_iterations": max(args.iterations, 2),
            "ranks": "CU, c0-d0, c0-d2, edge (c0-d1 holds no TEB), one torch thread each",
            "host_cpus": os.cpu_count(),
            "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "wall_s": round(time.monotonic() - started, 1),
            # with --reuse: the run that measured (its load and time)
            **({"measured_by": reused.get("scenario")} if reused else {}),
        },
        "goal": f"modeled/measured within ±{GOAL:.0%}",
        "models": results,
        "pooled_fit": pooled,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
