"""The regime map through the service: where a pipeline across devices pays and where one device should
train every block, DSSDA against every baseline.

Runs the regime-map study preset (``examples/studies/regime-map.yaml``: D2D channel bandwidth ×
device memory × every policy, analytic, fixed batch) on a deployment as ``collapipe serve`` serves it
(``bench/studies.py``'s ``serve``: by default the embedded one, SQLite with one local process per run,
``--slots`` at once; ``--deployment production``: PostgreSQL, Redis and ``--slots`` Celery workers)
and prints the map the study's summary gives (``GET /api/studies/{id}`` → ``regime_map``; the study
page and the HTML report draw the same): per point of link rate × memory, side by side,

- ``DSSDA / best``: DSSDA's mean round latency over the best budget holder's — the baseline with the
  least mean latency among those whose every run keeps the devices' time-average energy within budget
  (``energy_over_budget_max`` ≤ 1) and every device's modeled memory within capacity — and that
  baseline's name. With a fixed batch every policy trains the same samples per round, so this is also
  the ratio of their times to any target loss (cumulative latency over the same rounds);
- ``devices``: DSSDA's devices holding blocks per cluster (1: no pipeline) and ``M``: its micro-batches
  (means over rounds, clusters and seeds);
- ``memory / fl``: DSSDA's peak device memory over ``fl``'s (the whole encoder on every device).

Options change the preset's study, never its constants silently: ``--seeds``, ``--rounds``, the axes'
values (``--x``, ``--y``: JSON lists), more bases for other model sizes (``--model NAME=JSON``: the
base config's ``model`` section updated with JSON; one map panel each), and ``--set FIELD=JSON`` for a
what-if on every base (``--base-name`` renames the preset's base when ``--set`` changed its model).
``--json OUT`` writes the map, every cell's mean figures and the run's settings.

    .venv/bin/python bench/regime_map.py [--seeds 1,2,3] [--rounds 10] [--x JSON] [--y JSON] \\
        [--model bert-small='{"d_model": 512, "num_heads": 8, "ffn_dim": 2048}'] [--set FIELD=JSON] \\
        [--base-name NAME] [--slots 2] [--deployment embedded|production] [--json OUT]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.studies.grid import run_config  # noqa: E402
from backend.studies.presets import PRESETS_DIR, load_study_file  # noqa: E402
from bench.service_processes import load_average  # noqa: E402
from bench.studies import _runs, _wait_finished, serve  # noqa: E402

PRESET = PRESETS_DIR / "regime-map.yaml"


def _assignment(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=JSON")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not JSON ({err})") from None


def _json_list(text: str) -> list[Any]:
    values = json.loads(text)
    if not isinstance(values, list) or not values:
        raise argparse.ArgumentTypeError(f"{text!r}: give a JSON list of values")
    return values


def study_body(args: argparse.Namespace) -> dict[str, Any]:
    """The preset's study with the command line's changes."""
    _, body = load_study_file(args.preset)
    axes = {a["field"]: a for a in body["axes"]}
    regime = body["regime_map"]
    if args.seeds:
        axes["seed"]["values"] = args.seeds
    if args.x:
        axes[regime["x"]]["values"] = args.x
    if args.y:
        axes[regime["y"]]["values"] = args.y
    overrides = dict(args.set)
    if args.rounds:
        overrides["training.rounds"] = args.rounds
    bases = [{**b, "config": run_config(b["config"], overrides)} for b in body["bases"]]
    if args.base_name:
        bases[0]["name"] = args.base_name
    for name, model in args.model:
        config = copy.deepcopy(bases[0]["config"])
        config["model"] = {**config["model"], **model}
        bases.append({"name": name, "config": config})
    return {**body, "name": f"{body['name']} (bench)", "bases": bases}


def _grid(title: str, regime: dict[str, Any], panel: int, cell: Any) -> list[str]:
    points = {(p["y"], p["x"]): p for p in regime["points"] if p["panel"] == panel}
    width = max(len(title), *(len(cell(p)) for p in points.values()), *(len(x) for x in regime["x_labels"]))
    lines = [title.ljust(width * len(regime["x_labels"]) + len(regime["x_labels"]) - 1)]
    lines.append(" ".join(x.rjust(width) for x in regime["x_labels"]))
    for y in range(len(regime["y_labels"])):
        row = [cell(points[(y, x)]) if (y, x) in points else "" for x in range(len(regime["x_labels"]))]
        lines.append(" ".join(text.rjust(width) for text in row))
    return lines


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def side_by_side(regime: dict[str, Any]) -> str:
    """Every panel's map as text: DSSDA / best holder (and which), devices, M, memory / fl."""
    grids = [
        (
            "DSSDA / best holder",
            lambda p: (
                "none holds"
                if p["latency_ratio"] is None
                else f"{p['latency_ratio']:.3f} {p['best_baseline']}"
            ),
        ),
        ("devices", lambda p: _number(p["devices_holding_blocks"], 2)),
        ("M", lambda p: _number(p["microbatches"])),
        ("memory / fl", lambda p: _number(p["memory_ratio_to_fl"])),
    ]
    out = []
    label_width = max(len(y) for y in regime["y_labels"]) + 2
    for panel, name in enumerate(regime["panels"]):
        blocks = [_grid(title, regime, panel, cell) for title, cell in grids]
        out.append(f"\n{name or 'map'}: x {regime['x_field']}, y {regime['y_field']}")
        labels = ["", "", *regime["y_labels"]]
        for i, label in enumerate(labels):
            out.append(label.ljust(label_width) + " | ".join(block[i] for block in blocks))
    out.append("\n" + regime["note"])
    return "\n".join(out)


def run(args: argparse.Namespace) -> dict[str, Any]:
    body = study_body(args)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="collapipe-bench-regime-") as tmp,
        serve(args.deployment, Path(tmp), args.slots) as served,
        served.client() as client,
    ):
        response = client.post("/api/studies", json=body)
        post_s = time.monotonic() - started
        assert response.status_code == 201, response.text
        study_id = response.json()["id"]
        print(f"study {study_id}: {response.json()['progress']['runs_total']} runs", file=sys.stderr)
        _wait_finished(served, args.timeout_s, study_id=study_id)
        runs = _runs(served, study_id=study_id)
        failed = [(r.id, r.error) for r in runs if r.status != "succeeded"]
        assert not failed, failed
        detail = client.get(f"/api/studies/{study_id}").raise_for_status().json()
    return {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "study": {"definition": detail["definition"], "seeds": detail["seeds"]},
        "regime_map": detail["regime_map"],
        "cells": [
            {
                "index": c["index"],
                "label": c["label"],
                "means": {name: m["mean"] for name, m in c["metrics"].items()},
            }
            for c in detail["cells"]
        ],
        "wall_s": round(time.monotonic() - started, 1),
        "post_s": round(post_s, 1),
        "execution_s_by_policy": _execution_by_policy(runs),
        "load_average_at_end": load_average(),
    }


def _execution_by_policy(runs: list[Any]) -> dict[str, dict[str, float]]:
    """Per policy the runs' execution times (claim to finish, as stored): median and sum."""
    times: dict[str, list[float]] = {}
    for r in runs:
        if r.started_at is not None and r.finished_at is not None:
            times.setdefault(r.policy, []).append((r.finished_at - r.started_at).total_seconds())
    return {
        p: {"median_s": round(statistics.median(t), 2), "sum_s": round(sum(t), 1)} for p, t in times.items()
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset", type=Path, default=PRESET, help="the study file (default the regime-map preset)"
    )
    parser.add_argument(
        "--seeds", type=lambda t: [int(s) for s in t.split(",")], default=None, help="seeds, e.g. 1,2,3"
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds per run (default the preset's)")
    parser.add_argument("--x", type=_json_list, default=None, help="the map's x axis values (JSON list)")
    parser.add_argument("--y", type=_json_list, default=None, help="the map's y axis values (JSON list)")
    parser.add_argument(
        "--model",
        type=_assignment,
        action="append",
        default=[],
        help="NAME=JSON: a base with this model section",
    )
    parser.add_argument(
        "--set", type=_assignment, action="append", default=[], help="FIELD=JSON: set a field of every base"
    )
    parser.add_argument(
        "--base-name", default=None, help="rename the preset's base (after --set changed its model)"
    )
    parser.add_argument(
        "--slots", type=int, default=2, help="runs at once (local processes or Celery workers)"
    )
    parser.add_argument(
        "--deployment", choices=("embedded", "production"), default="embedded", help="as bench/studies.py"
    )
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--json", type=Path, default=None, help="write the map and the cells' figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    report = run(args)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    print(side_by_side(report["regime_map"]))
    print(f"\nwall time {report['wall_s']} s (the POST that checks every run's config: {report['post_s']} s)")
    print(f"load average {report['load_average_at_end']}")
    print(f"execution per policy: {report['execution_s_by_policy']}")
    return report


if __name__ == "__main__":
    main()
