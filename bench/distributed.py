"""The distributed executor measured against the cost model, side by side in one run.

One cluster: CU → c0-d0 (4 TEBs) → c0-d1 (0 TEBs, sits out) → c0-d2 (2 TEBs) → edge server, a
classifier with d = 128, h = 4, f = 512, s = 64, b = 8, M = 4, AdamW, I local iterations per round.
Each schedule gets its own round after a warm-up round (so the optimizer state exists, as in any
later round of a run). Prints JSON:

- ``memory``: per device and schedule, the measured peak (tensor tracker, and resident set = weights
  and optimizer state + the VmHWM rise) beside the cost model's estimate without its runtime
  overhead; goal: within 20 %;
- ``activation_per_teb``: what one TEB saves for backward per sample in a real run (autograd
  saved-tensor hooks on real tensors) against the profile's figure (measured on fake tensors);
- ``schedules``: 1F1B against GPipe peak memory per device, measured and modeled;
- ``step_time``: the measured iteration time (first iteration of a round excluded: warm-up and the
  tensor tracker) against the ideal pipeline bound built from the measured per-micro-batch stage
  times (the discrete-event timeline of :mod:`collapipe_core.costmodel.timeline`); goal ≤ 1.15×.
  Once with instant links and once with links emulated at the modeled rates.

    .venv/bin/python bench/distributed.py [--iterations 4] [--no-links]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from typing import Any

import torch

from collapipe_core.costmodel import evaluate, link_rate_bps
from collapipe_core.costmodel.timeline import Stage, simulate
from collapipe_core.data import load_dataset
from collapipe_core.decision import Decision
from collapipe_core.models.blocks import EncoderBlock
from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions
from collapipe_core.pipeline.distributed.link import transfer_s
from collapipe_core.state import RoundState, build_environment, observe
from collapipe_core.validation import parse_config

SEGMENTS = [4, 0, 2]
MICROBATCHES = 4
MIB = 2**20


def scenario(iterations: int) -> dict[str, Any]:
    return {
        "name": "bench-distributed",
        "seed": 1,
        "executor": "distributed",
        "network": {"num_clusters": 1, "devices_per_cluster": len(SEGMENTS)},
        "model": {
            "kind": "classifier",
            "d_model": 128,
            "num_heads": 4,
            "ffn_dim": 512,
            "num_blocks": sum(SEGMENTS),
            "seq_len": 64,
            "dropout": 0.0,
        },
        "data": {"dataset": "synthetic-parity", "samples_per_cluster": 128, "eval_samples": 32},
        "training": {"rounds": 3, "local_iterations": iterations, "microbatch_size": 8, "optimizer": "adamw"},
        "scheduler": {"policy": "fixed", "segments": SEGMENTS, "num_microbatches": MICROBATCHES},
    }


def _state(base: RoundState, round_index: int, schedule: str) -> RoundState:
    env = base.env
    env = dataclasses.replace(env, settings=dataclasses.replace(env.settings, schedule=schedule))
    return observe(env, round_index)


def _decision(state: RoundState) -> Decision:
    scheduled = [1.0 if blocks else 0.0 for blocks in SEGMENTS]
    shares = [s / sum(scheduled) for s in scheduled]
    power = [float(p) * s for p, s in zip(state.scenario.max_power_w[0], scheduled, strict=True)]
    return Decision.from_arrays([SEGMENTS], [shares], [power], MICROBATCHES)


def saved_activation_bytes(d: int, h: int, f: int, s: int, b: int) -> float:
    """Bytes one TEB keeps for backward per sample, counted with autograd's saved-tensor hooks."""
    block = EncoderBlock(d, h, f, 0.0)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    x = torch.randn(b, s, d, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, torch.ones(b, s, dtype=torch.bool))
    return sum(saved.values()) / b


def run_rounds(config: Any, bundle: Any, base: RoundState, links: bool) -> dict[str, Any]:
    """Warm-up round, then one GPipe and one 1F1B round; per schedule the measured figures and details."""
    out: dict[str, Any] = {}
    options = DistributedOptions(link_emulation=links)
    with DistributedExecutor(config, bundle, options) as executor:
        for t, schedule in enumerate(["gpipe", "gpipe", "1f1b"]):
            state = _state(base, t, schedule)
            decision = _decision(state)
            outcome = executor.execute(state, decision)
            if t > 0:
                out[schedule] = {
                    "state": state,
                    "decision": decision,
                    "measured": outcome.measured,
                    "details": executor.last_details,
                }
    return out


def step_time(run: dict[str, Any], schedule: str, links: bool) -> dict[str, Any]:
    """Measured iteration time (iterations ≥ 1) against the timeline bound from measured stage times."""
    details, state, decision = run["details"], run["state"], run["decision"]
    order = ["c0-cu", *(f"c0-d{k}" for k, blocks in enumerate(SEGMENTS) if blocks), "c0-edge"]
    m = MICROBATCHES
    iterations = len(details["c0-cu"]["step_start_s"])
    # one iteration: from its first forward (stage 0, micro-batch 0) to its last backward anywhere
    spans = []
    for i in range(1, iterations):
        first = min(details[p]["forward_starts_s"][i * m] for p in order)
        last = max(
            details[p]["backward_starts_s"][i * m + j] + details[p]["backward_chunks_s"][i * m + j]
            for p in order
            for j in range(m)
        )
        spans.append(last - first)

    def steady_mean(values: list[float]) -> float:
        return statistics.fmean(values[m:])  # drop the first iteration's micro-batches

    sc, b = state.scenario, state.settings.samples_per_microbatch(MICROBATCHES)
    elements = b * 64 * 128
    rates = link_rate_bps(
        decision.bandwidth_share(), decision.power_w(), state.gain, sc.bandwidth_hz, sc.noise_density_w_per_hz
    )
    send_rate = {"c0-cu": sc.cu_link_rate_bps, "c0-edge": sc.edge_downlink_rate_bps}
    for k, blocks in enumerate(SEGMENTS):
        if blocks:
            send_rate[f"c0-d{k}"] = float(rates[0, k])
    stages: list[Stage] = []
    for i, name in enumerate(order):
        if i > 0:
            forward = transfer_s(elements, 4, send_rate[order[i - 1]]) if links else 0.0
            backward = transfer_s(elements, 4, send_rate[name]) if links else 0.0
            stages.append(Stage(f"{order[i - 1]}->{name}", "link", forward, backward))
        d = details[name]
        stages.append(
            Stage(name, "compute", steady_mean(d["forward_chunks_s"]), steady_mean(d["backward_chunks_s"]))
        )
    bound = simulate(stages, m, schedule).makespan_s  # type: ignore[arg-type]
    measured = statistics.fmean(spans)
    return {
        "measured_iteration_s": round(measured, 5),
        "ideal_bound_s": round(bound, 5),
        "ratio": round(measured / bound, 3),
        "goal_ratio_at_most": 1.15,
        "stage_forward_ms": {s.name: round(1e3 * s.forward_s, 3) for s in stages},
        "stage_backward_ms": {s.name: round(1e3 * s.backward_s, 3) for s in stages},
    }


def memory_rows(runs: dict[str, Any], config: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    overhead = float(config.network.runtime_overhead_bytes)
    rows, ratios = [], {}
    for schedule, run in runs.items():
        modeled = evaluate(run["state"], run["decision"]).memory_bytes
        for k, blocks in enumerate(SEGMENTS):
            name = f"c0-d{k}"
            if not blocks:
                continue
            m = run["measured"][name]
            model_bytes = float(modeled[0, k]) - overhead
            tensor_peak = m["peak_tensor_bytes"]
            rss_peak = m["resident_state_bytes"] + m["peak_rss_delta_bytes"]
            rows.append(
                {
                    "device": name,
                    "schedule": schedule,
                    "blocks": blocks,
                    "modeled_mib": round(model_bytes / MIB, 2),
                    "measured_tensor_peak_mib": round(tensor_peak / MIB, 2),
                    "measured_rss_peak_mib": round(rss_peak / MIB, 2),
                    "tensor_over_model": round(tensor_peak / model_bytes, 3),
                    "rss_over_model": round(rss_peak / model_bytes, 3),
                    "within_20_percent": abs(tensor_peak / model_bytes - 1) <= 0.2
                    and abs(rss_peak / model_bytes - 1) <= 0.2,
                    "measured_state_mib": round(m["state_bytes"] / MIB, 2),
                    "process_rss_peak_mib": round(m["peak_rss_bytes"] / MIB, 1),
                    "process_rss_baseline_mib": round(m["baseline_rss_bytes"] / MIB, 1),
                }
            )
            ratios.setdefault(name, {})[schedule] = (tensor_peak, rss_peak, model_bytes)
    comparison = {
        name: {
            "tensor_1f1b_over_gpipe": round(v["1f1b"][0] / v["gpipe"][0], 3),
            "rss_1f1b_over_gpipe": round(v["1f1b"][1] / v["gpipe"][1], 3),
            "modeled_1f1b_over_gpipe": round(v["1f1b"][2] / v["gpipe"][2], 3),
        }
        for name, v in ratios.items()
    }
    return rows, comparison


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=4, help="local iterations per round (≥ 2)")
    parser.add_argument("--no-links", action="store_true", help="skip the run with emulated links")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = parse_config(scenario(max(args.iterations, 2)))
    bundle = load_dataset(config)
    base = observe(build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None), 0)

    runs = run_rounds(config, bundle, base, links=False)
    m = config.model
    measured_teb = saved_activation_bytes(m.d_model, m.num_heads, m.ffn_dim, m.seq_len, 8)
    memory, schedules = memory_rows(runs, config)
    result: dict[str, Any] = {
        "scenario": {
            "segments": SEGMENTS,
            "num_microbatches": MICROBATCHES,
            "microbatch_size": config.training.fixed_microbatch_size,
            "local_iterations": config.training.local_iterations,
            "model": m.model_dump(),
            "ranks": "CU, c0-d0, c0-d2, edge (c0-d1 holds no TEB); 2-core host, 1 torch thread per rank",
        },
        "memory": memory,
        "schedules": schedules,
        "activation_per_teb": {
            "real_run_bytes_per_sample": measured_teb,
            "profile_bytes_per_sample": state_profile_activation(runs),
            "profile_over_real_run": round(state_profile_activation(runs) / measured_teb, 3),
        },
        "step_time": {
            "instant_links": {sched: step_time(runs[sched], sched, links=False) for sched in runs},
        },
        "time_split_s": {
            sched: {
                p: {k: round(v[k], 4) for k in ("compute_s", "send_s", "recv_s", "idle_s", "step_s")}
                for p, v in run["measured"].items()
            }
            for sched, run in runs.items()
        },
    }
    if not args.no_links:
        linked = run_rounds(config, bundle, base, links=True)
        result["step_time"]["emulated_links"] = {
            sched: step_time(linked[sched], sched, links=True) for sched in linked
        }
    print(json.dumps(result, indent=2))


def state_profile_activation(runs: dict[str, Any]) -> float:
    run = next(iter(runs.values()))
    return float(run["state"].profile.block_activation_bytes)


if __name__ == "__main__":
    main()
