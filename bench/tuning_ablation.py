"""Each request-path optimisation's effect on the API's latency, side by side in one run.

Per stack — production (PostgreSQL, one API process) and the embedded default (SQLite) — one
database is filled as bench/service.py fills it (a 1,000-round run, 200 finished runs); then
``--repeats`` times, in an order rotated each time, the API is started with each variant — every
optimisation on (``all_on``), one of them off (``without_<name>``, bench/tuning_toggles.py), all off
(``all_off``) — warmed up for 2 s at 50 requests/s and loaded as bench/service.py loads it: the run
listing and a downsampled 1,000-round series in turn at ``--rate`` requests/s for ``--seconds`` s,
open loop. Goal: p99 <= 50 ms at 200 requests/s.

Reported per variant: each repeat's p50/p99 of both paths, the 1-minute load average at its start,
the cores other processes kept busy meanwhile and the API's CPU ms per request; the median over the
repeats of the worse path's p99 and of the API's CPU per request, and their ratios to ``all_on``. A
load during which other processes kept more than ``--max-other-cores`` busy is measured again once
the host is quiet (up to ``--retries`` times; still noisy: counted in ``noisy_repeats``).
With ``--stream-load`` also bench/service.py's 100-streams scenario per variant and deployment
(listing p99, goal <= 250 ms).

    .venv/bin/python bench/tuning_ablation.py [--rate 200] [--seconds 20] [--repeats 2] \
        [--stacks production,embedded] [--only gc_tuning,series_cache] [--stream-load]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.runtime.wake import NoWake  # noqa: E402
from bench import service, tuning_toggles  # noqa: E402
from bench.service_processes import REDIS_DB, bench_stream_load, load_average, start_api  # noqa: E402
from tests.integration.http_load import paced_load  # noqa: E402
from tests.integration.processes import ProcessGroup, free_port  # noqa: E402
from tests.workers.services import fresh_postgres_database, redis_namespace  # noqa: E402

WARM_UP_RATE, WARM_UP_S = 50.0, 2.0


def variants(names: list[str]) -> dict[str, list[str]]:
    """Variant label -> the optimisations it switches off."""
    found: dict[str, list[str]] = {"all_on": []}
    found |= {f"without_{name}": [name] for name in names}
    found["all_off"] = list(tuning_toggles.TOGGLES)
    return found


def rotated(labels: list[str], repeat: int) -> list[str]:
    shift = repeat % len(labels)
    return labels[shift:] + labels[:shift]


def load_variant(
    env: dict[str, str],
    without: list[str],
    token: str,
    paths: dict[str, str],
    args: argparse.Namespace,
    log_dir: Path,
    postgres: bool,
) -> dict[str, Any]:
    processes = ProcessGroup(env, log_dir)
    try:
        port = free_port()
        api = start_api(processes, port, 1, without)
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"}
        asyncio.run(paced_load(url, headers, list(paths.values()), WARM_UP_RATE, WARM_UP_S))
        time.sleep(1.0)
        return service.api_load(url, token, paths, args.rate, args.seconds, api.pid, postgres)
    finally:
        processes.close()


def measure_quietly(measure: Callable[[], dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """``measure()``, again (after waiting for a quiet host) while other processes kept more than
    ``--max-other-cores`` busy during it, up to ``--retries`` times; the last one is marked noisy."""
    for attempt in range(1 + args.retries):
        load = measure()
        load["attempts"] = attempt + 1
        others = load["cpu"]["other_processes_cores"]
        if others <= args.max_other_cores:
            return load
        print(f"  other processes kept {others} cores busy: measuring again when quiet", file=sys.stderr)
        wait_for_quiet(args.max_other_cores + 0.5)
    load["noisy"] = True
    return load


def wait_for_quiet(max_load: float, timeout_s: float = 1800.0) -> None:
    """Until the 1-minute load average is below ``max_load`` (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(10.0)


def summarise(runs: dict[str, list[dict[str, Any]]], paths: list[str]) -> dict[str, Any]:
    """Median over the repeats of the worse path's p99 and of the API's CPU per request; ratios."""
    summary: dict[str, Any] = {}
    for label, loads in runs.items():
        worst_p99 = [max(load[path].get("p99", float("inf")) for path in paths) for load in loads]
        cpu = [load["cpu"]["api_ms_per_request"] for load in loads]
        summary[label] = {
            "worst_path_p99_ms_median": round(statistics.median(worst_p99), 2),
            "api_cpu_ms_per_request_median": round(statistics.median(cpu), 3),
            "p99_ms_by_repeat": {path: [load[path].get("p99") for load in loads] for path in paths},
            "p50_ms_by_repeat": {path: [load[path].get("p50") for load in loads] for path in paths},
            "load_average_by_repeat": [load["load_average"] for load in loads],
            "other_processes_cores_by_repeat": [load["cpu"]["other_processes_cores"] for load in loads],
            "noisy_repeats": sum(bool(load.get("noisy")) for load in loads),
            "errors_and_timeouts": sum(
                load[path]["errors"] + load[path]["timeouts"] for load in loads for path in paths
            ),
        }
    base = summary["all_on"]
    for figures in summary.values():
        figures["p99_ratio_to_all_on"] = round(
            figures["worst_path_p99_ms_median"] / base["worst_path_p99_ms_median"], 2
        )
        figures["cpu_ratio_to_all_on"] = round(
            figures["api_cpu_ms_per_request_median"] / base["api_cpu_ms_per_request_median"], 2
        )
    return summary


def ablate_stack(
    name: str,
    env: dict[str, str],
    database_url: str,
    args: argparse.Namespace,
    root: Path,
) -> dict[str, Any]:
    token, _config, _results, ingest = service.fill_database(database_url, NoWake())
    paths = service.load_paths(ingest["run_id"])
    chosen = variants(args.only)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in chosen}
    for repeat in range(args.repeats):
        for label in rotated(list(chosen), repeat):
            log_dir = root / f"{name}-{label}-{repeat}"
            postgres = name == "production"
            measure = partial(load_variant, env, chosen[label], token, paths, args, log_dir, postgres)
            runs[label].append(measure_quietly(measure, args))
            p99 = {path: runs[label][-1][path].get("p99") for path in paths}
            print(f"{name} {label} repeat {repeat}: p99 ms {p99}", file=sys.stderr, flush=True)
            time.sleep(2.0)
    return summarise(runs, list(paths))


def ablate_stream_load(deployment: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    chosen = variants(args.only)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in chosen}
    for repeat in range(args.repeats):
        for label in rotated(list(chosen), repeat):
            runs[label].append(bench_stream_load(deployment, root, chosen[label]))
    return {
        label: {
            "listing_p99_ms_by_repeat": [r["listing_ms"].get("p99") for r in reports],
            "listing_p50_ms_by_repeat": [r["listing_ms"].get("p50") for r in reports],
            "rounds_per_stream_min_max_by_repeat": [r["rounds_per_stream_min_max"] for r in reports],
            "load_average_by_repeat": [r["load_average"] for r in reports],
        }
        for label, reports in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s (the goal is set at 200)")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each measured load")
    parser.add_argument("--repeats", type=int, default=2, help="measurements of each variant")
    parser.add_argument("--stacks", default="production,embedded", help="production, embedded or both")
    parser.add_argument(
        "--only",
        type=tuning_toggles.parse,
        default=list(tuning_toggles.TOGGLES),
        help=f"switch off these one at a time (default all: {', '.join(tuning_toggles.TOGGLES)})",
    )
    parser.add_argument("--stream-load", action="store_true", help="also the 100-streams scenario")
    parser.add_argument(
        "--max-other-cores",
        type=float,
        default=0.3,
        help="measure again when other processes kept more cores than this busy during a load",
    )
    parser.add_argument("--retries", type=int, default=3, help="measurements again at most, per load")
    args = parser.parse_args()
    stacks = set(args.stacks.split(","))
    report: dict[str, Any] = {"args": vars(args), "load_average_at_start": load_average()}
    with tempfile.TemporaryDirectory(prefix="collapipe-ablation-") as tmp:
        root = Path(tmp)
        if "production" in stacks:
            with (
                fresh_postgres_database("collapipe_bench") as pg_url,
                redis_namespace(REDIS_DB, "bench") as (redis_url, prefix),
            ):
                env = service.production_env(pg_url, redis_url, prefix, root)
                report["production_postgres_1_process"] = ablate_stack("production", env, pg_url, args, root)
        if "embedded" in stacks:
            sqlite_url = f"sqlite:///{root / 'embedded.db'}"
            env = service.embedded_env(sqlite_url, root)
            report["embedded_sqlite"] = ablate_stack("embedded", env, sqlite_url, args, root)
        if args.stream_load:
            report["stream_load"] = {
                deployment: ablate_stream_load(deployment, args, root)
                for deployment in ("production", "embedded")
                if deployment in stacks
            }
    report["goals"] = {"api_p99_ms_at_200_per_s": 50, "stream_load_listing_p99_ms": 250}
    report["load_average_at_end"] = load_average()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
