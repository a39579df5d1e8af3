"""A bench on another revision and on the working tree, side by side in one run.

Checks ``BASELINE_REV`` out into a git worktree under /tmp, and runs its own copy of the bench there
(the bench as it was at that revision, against the code of that revision, cwd and PYTHONPATH at the
worktree) and the working tree's bench here, with the same arguments and this interpreter (one
virtualenv serves both), alternating which goes first over ``--repeat`` rounds. Prints each headline
figure with its goal, the baseline's and the working tree's values (every repeat), the ratio of their
medians (working tree / baseline) and whether the working tree meets the goal; ``--json FILE`` keeps
both benches' full reports. The worktree is removed afterwards.

    .venv/bin/python bench/compare_revisions.py 31130a8 [--bench service] [--repeat 1] [--json FILE] \
        [--baseline-patch FILE] [-- ARGUMENTS OF THE BENCH]
    .venv/bin/python bench/compare_revisions.py 31130a8 -- --no-stream-load --api-workers 1
    .venv/bin/python bench/compare_revisions.py 31130a8 --bench dashboard -- --stacks redis

``--baseline-patch`` applies a patch (``git apply``) to the baseline's worktree first, for a bench of
that revision that no longer ran against its own test helpers. The figures are read from either
layout of a bench's report (a key renamed since the baseline is looked up under both names).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    label: str
    paths: tuple[tuple[str, ...], ...]  # where the value is, in each layout of the report
    goal: float | None = None  # an upper bound; None: no goal (shown for context)
    lower_is_better: bool = True


def api_figures(stack: str, label: str, processes: str) -> list[Figure]:
    return [
        Figure(
            f"API p99 ms at 200/s, {label}, {path}",
            ((stack, f"api_latency_ms_{processes}", "200_per_s", path, "p99"),),
            50,
        )
        for path in ("list_runs", "round_metrics")
    ]


SERVICE_FIGURES = [
    Figure("live p99 ms, Redis", (("production_postgres_redis", "live_latency_ms", "p99"),), 25),
    Figure("live p50 ms, Redis", (("production_postgres_redis", "live_latency_ms", "p50"),)),
    Figure("live p99 ms, embedded", (("embedded_sqlite_db_tail", "live_latency_ms", "p99"),), 150),
    Figure("live p50 ms, embedded", (("embedded_sqlite_db_tail", "live_latency_ms", "p50"),)),
    *api_figures("production_postgres_redis", "PostgreSQL, 1 process", "1_process"),
    *api_figures("production_postgres_redis", "PostgreSQL, 2 processes", "2_processes"),
    *api_figures("embedded_sqlite_db_tail", "SQLite", "1_process"),
    Figure(
        "API ms of CPU per request, PostgreSQL, 1 process, 200/s",
        (
            (
                "production_postgres_redis",
                "api_latency_ms_1_process",
                "200_per_s",
                "cpu",
                "api_ms_per_request",
            ),
        ),
    ),
    *[
        Figure(
            f"other processes' cores during the API load, {label}",
            ((stack, "api_latency_ms_1_process", "200_per_s", "cpu", "other_processes_cores"),),
        )
        for stack, label in (
            ("production_postgres_redis", "PostgreSQL"),
            ("embedded_sqlite_db_tail", "SQLite"),
        )
    ],
    Figure(
        "ingest rounds/s, PostgreSQL + Redis",
        (("production_postgres_redis", "ingest", "rounds_per_s"),),
        lower_is_better=False,
    ),
    Figure(
        "ingest rounds/s, SQLite",
        (("embedded_sqlite_db_tail", "ingest", "rounds_per_s"),),
        lower_is_better=False,
    ),
    Figure(
        "ingest rounds/s, PostgreSQL without publish/wake-up",
        (("ingest_without_wake_postgres", "rounds_per_s"), ("sql_sink_no_publish_postgres", "rounds_per_s")),
        lower_is_better=False,
    ),
    *[
        Figure(
            f"100 streams: listing p99 ms, {deployment}",
            (("stream_load", deployment, "listing_ms", "p99"),),
            250,
        )
        for deployment in ("production", "embedded")
    ],
    *[
        Figure(
            f"100 streams: fewest rounds a stream got, {deployment}",
            (("stream_load", deployment, "rounds_per_stream_min_max", "0"),),
            lower_is_better=False,
        )
        for deployment in ("production", "embedded")
    ],
]


def dashboard_figures(stack: str, label: str) -> list[Figure]:
    live = (stack, "live_draw_latency_ms")
    real = (stack, "live_draw_latency_real_worker_ms")
    return [
        Figure(f"real worker: published -> drawn p99 ms, {label}", ((*real, "p99"),), 100),
        Figure(f"real worker: published -> drawn p50 ms, {label}", ((*real, "p50"),)),
        Figure(f"bench worker: committed -> drawn p99 ms, {label}", ((*live, "p99"),), 100),
        Figure(f"bench worker: committed -> drawn p50 ms, {label}", ((*live, "p50"),)),
        Figure(
            f"bench worker: committed -> received p99 ms, {label}",
            ((*live, "commit_to_received", "p99"), (*live, "publish_to_received", "p99")),
        ),
        Figure(
            f"1,000 x 50 render, navigate -> drawn median ms, {label}",
            ((stack, "render_1000x50", "navigate_to_drawn_ms", "median"),),
            2000,
        ),
    ]


DASHBOARD_FIGURES = [
    *dashboard_figures("postgres_redis_celery", "Redis"),
    *dashboard_figures("embedded_sqlite", "embedded"),
]
BENCHES: dict[str, list[Figure]] = {"service": SERVICE_FIGURES, "dashboard": DASHBOARD_FIGURES}


def value_at(report: Any, figure: Figure) -> float | None:
    for path in figure.paths:
        node = report
        for key in path:
            if isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            elif isinstance(node, dict) and key in node:
                node = node[key]
            else:
                node = None
                break
        if isinstance(node, int | float):
            return float(node)
    return None


# -- running -----------------------------------------------------------------------------------------


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def run_bench(tree: Path, bench: str, bench_args: list[str], log: Path) -> dict[str, Any]:
    """``tree``'s own bench/<bench>.py with cwd and PYTHONPATH at ``tree``; its JSON report (with the
    load average before and after) or, if it failed, why."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, str(tree / "bench" / f"{bench}.py"), *bench_args]
    load_before = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    with log.open("w") as stderr:
        done = subprocess.run(argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    meta = {
        "tree": str(tree),
        "seconds": round(time.monotonic() - started, 1),
        "load_average_before": load_before,
        "load_average_after": round(os.getloadavg()[0], 2),
        "stderr_log": str(log),
    }
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        return {"compare": {**meta, "failed": f"exit status {done.returncode}: {tail}"}}
    report: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{") :])
    return {**report, "compare": meta}


def run_all(args: argparse.Namespace, baseline: Path, log_dir: Path) -> dict[str, list[dict[str, Any]]]:
    trees = {"baseline": baseline, "current": REPO}
    reports: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
    for repeat in range(args.repeat):
        order = ["baseline", "current"] if repeat % 2 == 0 else ["current", "baseline"]
        for name in order:
            print(
                f"[{repeat + 1}/{args.repeat}] {name}: {args.bench} {' '.join(args.bench_args)}",
                file=sys.stderr,
            )
            log = log_dir / f"{name}-{repeat}.log"
            reports[name].append(run_bench(trees[name], args.bench, args.bench_args, log))
            failed = reports[name][-1]["compare"].get("failed")
            if failed:
                print(f"  {name} failed: {failed}", file=sys.stderr)
    return reports


# -- the table ---------------------------------------------------------------------------------------


def show(values: list[float | None]) -> str:
    return " / ".join("—" if v is None else f"{v:g}" for v in values)


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def goal_met(figure: Figure, value: float | None) -> str:
    if figure.goal is None or value is None:
        return ""
    met = value <= figure.goal if figure.lower_is_better else value >= figure.goal
    return "yes" if met else "NO"


def table(figures: list[Figure], reports: dict[str, list[dict[str, Any]]]) -> str:
    header = ["figure", "goal", "baseline", "current", "current/baseline", "goal met (current)"]
    rows = [header]
    for figure in figures:
        baseline = [value_at(r, figure) for r in reports["baseline"]]
        current = [value_at(r, figure) for r in reports["current"]]
        if all(v is None for v in baseline + current):
            continue
        base_m, cur_m = median(baseline), median(current)
        ratio = f"{cur_m / base_m:.2f}" if base_m and cur_m is not None else "—"
        goal = (
            ""
            if figure.goal is None
            else f"<= {figure.goal:g}"
            if figure.lower_is_better
            else f">= {figure.goal:g}"
        )
        rows.append([figure.label, goal, show(baseline), show(current), ratio, goal_met(figure, cur_m)])
    for name in ("baseline", "current"):
        loads = [
            (r["compare"]["load_average_before"], r["compare"]["load_average_after"]) for r in reports[name]
        ]
        rows.append(
            [
                f"load average before -> after, {name}",
                "",
                " / ".join(f"{a}->{b}" for a, b in loads),
                "",
                "",
                "",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", help="the revision to compare with (e.g. 31130a8)")
    parser.add_argument("--bench", choices=sorted(BENCHES), default="service")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, alternating which goes first")
    parser.add_argument("--json", type=Path, help="write both benches' full reports here")
    parser.add_argument("--baseline-patch", type=Path, help="git apply this in the baseline's worktree first")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.bench_args = argv[split + 1 :]  # after --: the bench's own arguments
    revision = git("rev-parse", "--verify", f"{args.baseline}^{{commit}}")
    worktree = Path("/tmp") / f"collapipe-baseline-{revision[:8]}-{secrets.token_hex(3)}"
    git("worktree", "add", "--detach", str(worktree), revision)
    try:
        if args.baseline_patch is not None:
            git("apply", str(args.baseline_patch.resolve()), cwd=worktree)
        log_dir = Path(f"{worktree}-logs")
        log_dir.mkdir()
        reports = run_all(args, worktree, log_dir)
    finally:
        git("worktree", "remove", "--force", str(worktree))
    current = git("rev-parse", "--short", "HEAD")
    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    print(f"{args.bench}: baseline {revision[:8]} vs current {current}{dirty}; arguments {args.bench_args}")
    print(f"(logs in {log_dir})\n")
    print(table(BENCHES[args.bench], reports))
    if args.json is not None:
        document = {"baseline": revision, "current": current + dirty, "reports": reports}
        args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
