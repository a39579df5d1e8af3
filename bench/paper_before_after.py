"""`collapipe bench paper` on an earlier revision and on the working tree, in one run, side by side.

Checks ``REV`` out into a git worktree under /tmp and runs its own bench/paper.py there (its code, its
bench, cwd and PYTHONPATH at the worktree, this interpreter, ``--rounds``), then this tree's bench twice
in ``--reading`` (``batch``, the scenarios as written, or ``microbatch``, the fixed micro-batch reading
derived from them): with the convergence term the scenarios configure (``--convergence variance``, as
``REV`` had it; no extras) and with the measured one (the bench's default, ``noise_scale``) over
``--seeds``, with the extras and the decision-time grid of ``--decision-devices``. Each run writes its
outputs under ``--out`` (before/, after-variance/, after/). Printed at the end: every policy's figures of
the three runs side by side per scenario (each run's paper.csv, its first seed, this tree's runs in
``--reading``), and DSSDA's decision times before and after.
The worktree is removed afterwards.

    .venv/bin/python bench/paper_before_after.py 6acf0c0 --out /tmp/paper-before-after \
        [--reading batch|microbatch] [--rounds 120] [--seeds 1,2,3,4,5] [--decision-devices 4,12,50,100,1000]

A revision whose scheduler needs numba (6acf0c0 and earlier) needs it importable by this interpreter.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIGURES = (  # (paper.csv column, label, format)
    ("mean_latency_s", "latency s", ".1f"),
    ("latency_per_sample_s", "s/sample", ".4f"),
    ("mean_microbatches", "M", ".1f"),
    ("efficiency", "efficiency", ".3f"),
    ("peak_memory_bytes", "peak GB", ".2f"),
    ("energy_over_budget_max", "E/Ē max", ".2f"),
    ("time_to_target_s", "to target s", ".0f"),
    ("rounds_to_target", "rounds", ".0f"),
    ("mean_blocks_moved", "moved/round", ".1f"),
)
RUNS = ("before", "after-variance", "after")


def run(tree: Path, args: list[str], out: Path) -> float:
    """``tree``'s bench/paper.py with ``args`` writing to ``out``; its wall time (s)."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (out / "stdout.json").open("w") as stdout, (out / "stderr.log").open("w") as stderr:
        subprocess.run(
            [sys.executable, str(tree / "bench" / "paper.py"), *args, "--json", "--out", str(out)],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            stdout=stdout,
            stderr=stderr,
            check=True,
        )
    return time.perf_counter() - started


def read(path: Path, reading: str) -> dict[tuple[str, str], dict[str, str]]:
    """paper.csv rows of ``reading`` by (scenario, policy) (every row of a revision whose bench had one
    reading); the first seed's where the run had several."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if row.get("reading", reading) == reading:
                rows.setdefault((row["scenario"], row["policy"]), row)
    return rows


def cell(row: dict[str, str] | None, key: str, spec: str) -> str:
    value = None if row is None else row.get(key)
    if value in (None, "", "None"):
        return "—"
    number = float(value)
    return format(number / 1e9 if key == "peak_memory_bytes" else number, spec)


def table(results: dict[str, dict[tuple[str, str], dict[str, str]]]) -> str:
    keys = sorted({key for rows in results.values() for key in rows})
    lines = []
    for scenario in sorted({s for s, _ in keys}):
        lines.append(f"== {scenario}: before | after, variance term | after, measured noise scale")
        lines.append("policy        " + "".join(f"{label:>30s}" for _, label, _ in FIGURES))
        for policy in [p for s, p in keys if s == scenario]:
            cells = [
                " | ".join(cell(results[r].get((scenario, policy)), key, spec) for r in RUNS)
                for key, _, spec in FIGURES
            ]
            lines.append(f"{policy:14s}" + "".join(f"{c:>30s}" for c in cells))
    return "\n".join(lines)


def decision_times(runs: dict[str, Path]) -> str:
    """DSSDA's median decision time (ms) per grid cell, before | after (each run's JSON summary)."""
    grids = {}
    for name, out in runs.items():
        summary = json.loads((out / "stdout.json").read_text())
        grids[name] = {(r["devices"], r["blocks"]): r["median_ms"] for r in summary["decision_time"]}
    cells = sorted(set(grids["before"]) | set(grids["after"]))
    lines = ["== DSSDA decision time, median ms: before | after"]
    lines += [
        f"{devices:5d} devices x {blocks:2d} TEBs  "
        + " | ".join(f"{grids[n].get((devices, blocks), float('nan')):9.1f}" for n in ("before", "after"))
        for devices, blocks in cells
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="the earlier revision (e.g. 6acf0c0)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--reading",
        choices=("batch", "microbatch"),
        default="batch",
        help="this tree's reading of micro-batching (the earlier revision's bench has its own)",
    )
    parser.add_argument("--rounds", default="120", help="analytic rounds per policy (every run)")
    parser.add_argument("--seeds", default="1,2,3,4,5", help="seeds of the measured-term run")
    parser.add_argument("--train-rounds", help="every run's; default: each bench's own (a quick look)")
    parser.add_argument("--decision-devices", default="4,12,50,100,1000")
    args = parser.parse_args()
    common = ["--rounds", args.rounds, *(["--train-rounds", args.train_rounds] if args.train_rounds else [])]
    walls = {}
    with tempfile.TemporaryDirectory(prefix="paper-before-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.revision], cwd=REPO, check=True)
        try:
            walls["before"] = run(tree, common, args.out / "before")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=True)
    ours = [*common, "--readings", args.reading]
    walls["after-variance"] = run(
        REPO, [*ours, "--convergence", "variance", "--skip-extras"], args.out / "after-variance"
    )
    after = [*ours, "--max-train-rounds", args.rounds, "--seeds", args.seeds]
    walls["after"] = run(REPO, [*after, "--decision-devices", args.decision_devices], args.out / "after")
    results = {name: read(args.out / name / "paper.csv", args.reading) for name in RUNS}
    print(table(results))
    print(decision_times({name: args.out / name for name in ("before", "after")}))
    print("wall time s: " + ", ".join(f"{name} {wall:.0f}" for name, wall in walls.items()))


if __name__ == "__main__":
    main()
