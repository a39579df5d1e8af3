"""DSSDA's objective against recorded quality references, on seeded random rounds.

Two sets of instances (tests/core/scheduler/quality_instances.py rebuilds each from its generator's name
and seed):

- ``small``: ≤ 8 devices, ≤ 12 TEBs, M_max ≤ 8; the reference is ``optimal``'s objective (the exact
  optimum). Bar: DSSDA ≤ 1.01 × the reference on every instance.
- ``medium``: 12–50 devices, 8–24 TEBs; the reference is the objective of the scheduler's full-effort
  search as it was when recorded (the file's ``recorded_at``, 6acf0c0; that search is gone, and it is
  not exact at these sizes). Bar: geometric mean of DSSDA ÷ reference ≤ 1.005 and worst ≤ 1.02 (below
  1 is better than the reference).
- ``large``: 100–1,000 devices in clusters of 5, 12–48 TEBs; the reference is the objective of DSSDA's
  descent as of 2312e21 (two descents to a 1e-9 tolerance; the set's ``recorded_at``). The medium bars.

Every objective is ``evaluate(state, decision).objective`` (GPipe rounds: equal to the solvers' closed
form), and every decision is taken with no previous placement (``dssda.solve(state)``).

    nice -n 10 .venv/bin/python bench/scheduler_quality.py record [--small 240]
    nice -n 10 .venv/bin/python bench/scheduler_quality.py check [--only small|medium|large] [--stride 1]
    nice -n 10 .venv/bin/python bench/scheduler_quality.py fixed-batch [--count 120]
    nice -n 10 .venv/bin/python bench/scheduler_quality.py times [--repeats 21]

``record`` rewrites the small set of tests/core/scheduler/data/quality_references.json (the medium set is
re-scored from its stored decisions; the large one is kept as recorded, without decisions, so a change of
the cost model needs it recorded again from 2312e21): per set the generator, the seeds tried and found
infeasible (no placement fits in memory), and per recorded instance its seed, shape, TEBs and M_max
(checked on rebuild), the reference objective and its solve time; for ``medium`` also the decision then
shipped, its objective and time.
``check`` rebuilds the instances, runs today's DSSDA and prints one JSON object: per set the ratio
statistics, how many instances exceed the bar, and the median decision time (wall and CPU ms) per number
of devices. ``fixed-batch`` solves the first ``--count`` seeds of the fixed-batch small rounds
(``small_fixed_batch_instance``: B split into M of its divisors, per-transfer latency, fixed work per pass)
with ``optimal`` and DSSDA and prints the same statistics against the 1.01 bar (no recorded references: the
optimum is computed). ``times`` times DSSDA's decision at 12 devices (3 clusters × 4) × 12 blocks in both
readings of micro-batching (the fixed micro-batch reading of ``collapipe bench paper``'s decision-time grid,
and the same round with a fixed batch of 32, τ = 2 ms and 6 MFLOP of fixed work per pass), and apart from
it the cost of the decision's explanation (``collapipe_core.explain``: the counterfactuals' evaluations)
and of its constrained ``spread`` solve (DSSDA with at most L − 1 TEBs per device). Before each instance
every command waits while /tmp/quiet.flag exists (someone is measuring latency on
this machine).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from collapipe_core.decision import Decision  # noqa: E402
from collapipe_core.scheduler import dssda, optimal  # noqa: E402
from tests.core.scheduler.quality_instances import (  # noqa: E402
    GENERATORS,
    MEDIUM_GEOMEAN,
    MEDIUM_WORST,
    REFERENCES,
    SMALL_WORST,
    describe,
    load_references,
    rebuild,
    scored,
)

QUIET_FLAG = Path("/tmp/quiet.flag")
SIZE_BUCKETS = {
    "small": ((1, 2), (3, 4), (5, 6), (7, 8)),
    "medium": ((12, 16), (20, 25), (30, 36), (40, 50)),
    "large": ((100, 100), (250, 250), (500, 500), (1000, 1000)),
}
"""Device-count ranges the decision times are reported by."""


def wait_while_quiet() -> None:
    while QUIET_FLAG.exists():
        time.sleep(10)


def timed(solve: Callable[[], Decision]) -> tuple[Decision, float, float]:
    """(decision, wall s, CPU s of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    decision = solve()
    return decision, time.perf_counter() - wall, time.process_time() - cpu


def record_small(count: int) -> dict[str, Any]:
    instances: list[dict[str, Any]] = []
    infeasible: list[int] = []
    seed = 0
    while len(instances) < count:
        wait_while_quiet()
        state = GENERATORS["small"](seed)
        try:
            decision, wall, _cpu = timed(lambda s=state: optimal.solve(s)[0])
        except ValueError as error:
            if "no segment placement fits" not in str(error):
                raise
            infeasible.append(seed)
        else:
            instances.append(
                {
                    "seed": seed,
                    **describe(state),
                    "objective": scored(state, decision),
                    "optimal_s": round(wall, 4),
                }
            )
        seed += 1
    return {
        "generator": "small",
        "reference": "optimal",
        "seeds_tried": seed,
        "infeasible_seeds": infeasible,
        "instances": instances,
    }


def rescore_medium(recorded: dict[str, Any]) -> dict[str, Any]:
    """The medium set with each reference objective re-scored by today's cost model: the decision the
    former full-effort search took (stored with the instance) under ``evaluate`` as it is now."""
    instances = []
    for entry in recorded["instances"]:
        taken = entry["decision"]
        decision = Decision.from_arrays(
            taken["num_blocks"], taken["bandwidth_share"], taken["power_w"], taken["num_microbatches"]
        )
        instances.append({**entry, "objective": scored(rebuild("medium", entry), decision)})
    return {**recorded, "instances": instances}


def record(args: argparse.Namespace) -> None:
    wait_while_quiet()
    dssda.solve(GENERATORS["small"](1))  # one-off start-up costs (imports) before anything is timed
    cpu = time.process_time()
    recorded = load_references(args.out)
    sets = {
        "small": record_small(args.small),
        "medium": rescore_medium(recorded["medium"]),
        "large": recorded["large"],
    }
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    document = {
        "about": "Quality references of the scheduler (bench/scheduler_quality.py record); objectives are "
        "evaluate(state, decision).objective of instances rebuilt by "
        "tests/core/scheduler/quality_instances.GENERATORS[generator](seed)",
        "recorded_at": commit,
        "recording_cpu_s": round(time.process_time() - cpu, 1),
        **sets,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(document))
    counts = {name: len(s["instances"]) for name, s in sets.items()}
    print(json.dumps(counts | {"recording_cpu_s": document["recording_cpu_s"], "out": str(args.out)}))


def dumps(document: dict[str, Any]) -> str:
    """JSON with one line per instance (small and diff-friendly)."""
    lines = ["{"]
    items = list(document.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, dict) and "instances" in value:
            head = {k: v for k, v in value.items() if k != "instances"}
            lines.append(f'  {json.dumps(key)}: {json.dumps(head)[:-1]}, "instances": [')
            rows = value["instances"]
            lines += [
                f"    {json.dumps(row)}{',' if j < len(rows) - 1 else ''}" for j, row in enumerate(rows)
            ]
            lines.append(f"  ]}}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    return "\n".join([*lines, "}"]) + "\n"


def shipped_ratios(
    generator: str, entries: Iterable[dict[str, Any]]
) -> list[tuple[dict[str, Any], float, float, float]]:
    """(entry, today's DSSDA objective ÷ reference, wall s, CPU s) per entry; ∞ when DSSDA refuses."""
    out = []
    for entry in entries:
        wait_while_quiet()
        state = rebuild(generator, entry)
        try:
            decision, wall, cpu = timed(lambda s=state: dssda.solve(s)[0])
        except dssda.NoPlacementFits:  # any other error is a fault of the search: raised
            out.append((entry, math.inf, math.nan, math.nan))
            continue
        out.append((entry, scored(state, decision) / entry["objective"], wall, cpu))
    return out


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def ratio_figures(ratios: list[float], seeds: list[int]) -> dict[str, Any]:
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    return {
        "instances": len(ratios),
        "ratio_geomean": round(geomean(ratios), 6),
        "ratio_mean": round(statistics.fmean(ratios), 6),
        "ratio_worst": round(ratios[worst], 6),
        "worst_seed": seeds[worst],
        "ratio_best": round(min(ratios), 6),
    }


def times_by_size(generator: str, devices: list[int], seconds: list[float]) -> dict[str, float]:
    """Median ms per device-count bucket."""
    out = {}
    for low, high in SIZE_BUCKETS[generator]:
        cell = [s for d, s in zip(devices, seconds, strict=True) if low <= d <= high and not math.isnan(s)]
        if cell:
            out[f"{low}-{high} devices (n={len(cell)})"] = round(1e3 * statistics.median(cell), 2)
    return out


def check_set(generator: str, block: dict[str, Any], stride: int) -> dict[str, Any]:
    rows = shipped_ratios(generator, block["instances"][::stride])
    entries = [e for e, _, _, _ in rows]
    ratios = [r for _, r, _, _ in rows]
    seeds = [e["seed"] for e in entries]
    devices = [int(e["shape"][0] * e["shape"][1]) for e in entries]
    out = ratio_figures(ratios, seeds) | {"refused": sum(math.isinf(r) for r in ratios)}

    def recorded_ms(key: str) -> dict[str, float]:
        return times_by_size(generator, devices, [e[key] for e in entries])

    if generator == "small":
        out |= {
            f"above_{SMALL_WORST}": sum(r > SMALL_WORST for r in ratios),
            "below_the_optimum": sum(r < 1 - 1e-6 for r in ratios),  # would be a bug of either solver
            "passes": max(ratios) <= SMALL_WORST,
            "optimal_ms_median_recorded": recorded_ms("optimal_s"),
        }
    else:
        out |= {
            f"above_{MEDIUM_GEOMEAN}": sum(r > MEDIUM_GEOMEAN for r in ratios),
            f"above_{MEDIUM_WORST}": sum(r > MEDIUM_WORST for r in ratios),
            "better_than_reference": sum(r < 1 - 1e-9 for r in ratios),
            "passes": geomean(ratios) <= MEDIUM_GEOMEAN and max(ratios) <= MEDIUM_WORST,
        }
    if generator == "medium":
        out |= {
            "recorded_shipped_vs_reference": ratio_figures(
                [e["shipped_objective"] / e["objective"] for e in entries], seeds
            ),
            "full_ms_median_recorded": recorded_ms("full_s"),
            "full_cpu_ms_median_recorded": recorded_ms("full_cpu_s"),
            "shipped_ms_median_recorded": recorded_ms("shipped_s"),
        }
    if generator == "large":
        out["reference_cpu_ms_median_recorded"] = recorded_ms("reference_cpu_s")
    out["decision_ms_median"] = times_by_size(generator, devices, [w for _, _, w, _ in rows])
    out["decision_cpu_ms_median"] = times_by_size(generator, devices, [c for _, _, _, c in rows])
    return out


def check(args: argparse.Namespace) -> None:
    document = load_references(args.references)
    wait_while_quiet()
    dssda.solve(GENERATORS["small"](1))  # one-off start-up costs (imports) before anything is timed
    names = [args.only] if args.only else ["small", "medium", "large"]
    report: dict[str, Any] = {"references": str(args.references), "recorded_at": document["recorded_at"]}
    for name in names:
        report[name] = check_set(name, document[name], args.stride)
    print(json.dumps(report, indent=1))


def fixed_batch(args: argparse.Namespace) -> None:
    from tests.core.scheduler.quality_instances import small_fixed_batch_instance

    wait_while_quiet()
    ratios, seeds, chosen = [], [], []
    for seed in range(args.count):
        state = small_fixed_batch_instance(seed)
        try:
            _, best, _ = optimal.solve(state)
        except ValueError:
            continue
        decision, _ = dssda.solve(state)
        ratios.append(scored(state, decision) / best)
        seeds.append(seed)
        chosen.extend(decision.num_microbatches().tolist())
    print(
        json.dumps(
            {
                "instances": len(ratios),
                **ratio_figures(ratios, seeds),
                "above_bar": sum(r > SMALL_WORST for r in ratios),
                "microbatches_chosen": {str(m): chosen.count(m) for m in sorted(set(chosen))},
            },
            indent=1,
        )
    )


def _timing_rounds(fixed_batch: bool, count: int) -> list[Any]:
    """``count`` rounds of the 12 × 12 timing scenario (the channel and so the decision differ by round)."""
    from collapipe_core.state import build_environment, observe
    from collapipe_core.validation import parse_config

    training: dict[str, Any] = {"batch_size": 32} if fixed_batch else {}
    network: dict[str, Any] = {
        "num_clusters": 3,
        "devices_per_cluster": 4,
        "memory_bytes": {"low": 2e9, "high": 4e9},
    }
    if fixed_batch:
        network.update(link_latency_s=0.002, block_overhead_flops=6e6, block_backward_overhead_flops=6e6)
    config = parse_config(
        {
            "executor": "analytic",
            "network": network,
            "model": {"num_blocks": 12, "d_model": 64, "ffn_dim": 256},
            "data": {"dataset": "synthetic-reverse", "samples_per_cluster": 64, "eval_samples": 16},
            "training": training,
        }
    )
    env = build_environment(config, 12, 12, None)
    return [observe(env, t) for t in range(count)]


def times(args: argparse.Namespace) -> None:
    from collapipe_core.costmodel import evaluate
    from collapipe_core.explain import explain

    report: dict[str, Any] = {}
    for reading, fixed in (("fixed micro-batch", False), ("fixed batch", True)):
        states = _timing_rounds(fixed, args.repeats + 1)
        dssda.solve(states[-1])  # one-off start-up costs first
        decide, explained, spread = [], [], []
        for state in states[: args.repeats]:
            wait_while_quiet()
            started = time.perf_counter()
            decision, _ = dssda.solve(state)
            decide.append(time.perf_counter() - started)
            ev = evaluate(state, decision)
            started = time.perf_counter()
            explain(state, decision, ev, optimised=False)  # the evaluations only, no constrained solve
            explained.append(time.perf_counter() - started)
            started = time.perf_counter()
            dssda.solve(state, max_blocks_per_device=state.profile.num_blocks - 1)
            spread.append(time.perf_counter() - started)
        report[reading] = {
            "decision_ms_median": 1000 * statistics.median(decide),
            "decision_ms_max": 1000 * max(decide),
            "explanation_ms_median": 1000 * statistics.median(explained),
            "spread_solve_ms_median": 1000 * statistics.median(spread),
        }
    print(json.dumps({"devices": 12, "blocks": 12, "repeats": args.repeats, **report}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="compute and write the small set's references (optimal)")
    rec.add_argument("--small", type=int, default=240, help="small instances to record (feasible ones)")
    rec.add_argument("--out", type=Path, default=REFERENCES)
    chk = commands.add_parser("check", help="today's DSSDA against the recorded references")
    chk.add_argument("--references", type=Path, default=REFERENCES)
    chk.add_argument("--only", choices=["small", "medium", "large"])
    chk.add_argument("--stride", type=int, default=1, help="every n-th recorded instance")
    fixed = commands.add_parser("fixed-batch", help="DSSDA against optimal on fixed-batch small rounds")
    fixed.add_argument("--count", type=int, default=120, help="seeds tried (the infeasible ones are skipped)")
    tim = commands.add_parser("times", help="decision, explanation and spread-solve times at 12 x 12")
    tim.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    {"record": record, "check": check, "fixed-batch": fixed_batch, "times": times}[args.command](args)


if __name__ == "__main__":
    main()
