"""A study's wall time on the embedded default and on PostgreSQL + Redis with Celery workers, side by
side, against the time its runs take alone divided by the slots the study may use.

The study: the tiny analytic config (tests/backend/builders.py) × ``--policies`` × ``--seeds``
(default 5 × 8 = 40 runs of ``--rounds`` 30 rounds), ``concurrency`` = ``--slots``. Each deployment
is served as ``collapipe serve`` serves it (uvicorn on loopback), with ``--slots`` runs at once: the
embedded default's local executor (SQLite, ``COLLAPIPE_MAX_PARALLEL_RUNS``, one process per run,
forked from a server that preloaded torch) and ``--slots`` Celery worker processes (``-c 1`` each) on
PostgreSQL + Redis.

Per deployment:

- ``warm_up_execution_s``: a first study of 2 × slots runs, so that every Celery worker process
  has paid its first run's lazy set-up before anything is measured (on the embedded default, the
  forkserver's preloaded imports; each run's own set-up is paid again in its new process).
- ``single_run``: one run of each policy (seed 0) launched alone, one after the other, through the
  same service; per policy its ``end_to_end_s`` (from the POST to the run's finish as stored),
  ``execution_s`` (claim to finish as stored: ``started_at`` → ``finished_at``) and
  ``start_delay_s`` (POST to claim: dispatch, and on the embedded default the run's process start).
  The seeds of a policy only change random draws, so Σ single-run times is estimated as
  seeds × Σ over policies (``sum_single_run_s``; ``sum_single_execution_s`` likewise).
- ``study``: the study's ``wall_s`` from its POST to its last run's finish (as stored), its
  ``ideal_s`` = ``sum_single_run_s`` / min(slots, concurrency) and ``ratio`` = wall / ideal (goal:
  at most 1.10); ``ratio_to_execution`` is the wall against the runs' execution alone
  (``sum_single_execution_s`` / slots): what starting each run costs on top of running it.
  ``slot_occupancy`` = Σ of the study's runs' execution times (claim to finish, in the study) /
  (slots × wall): the share of the slots' time spent running runs (the rest: starting them, handing
  the next one over); runs executing side by side on a busy host take longer than alone, which shows
  as ``sum_execution_s`` above ``sum_single_execution_s``, not here.
- ``load_average`` (1 minute) before each measurement: other work on the host shows there.

    .venv/bin/python bench/studies.py [--rounds 30] [--seeds 8] [--policies dssda,uniform,...] [--slots 2] \
                                      [--only embedded|production]

Needs PostgreSQL and Redis on 127.0.0.1 (as the integration tests); uses a throwaway database and its
own key prefix in Redis db 14, both removed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from backend.db.engine import make_engine, make_session_factory  # noqa: E402
from backend.db.models import Run  # noqa: E402
from bench.service_processes import deployment_processes, load_average, start_api  # noqa: E402
from tests.backend.builders import tiny_config  # noqa: E402
from tests.integration.processes import Service, free_port, wait_until  # noqa: E402

DEPLOYMENTS = ("embedded", "production")
GOAL_RATIO = 1.10
POLL_S = 0.05


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    database_url: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)


@contextlib.contextmanager
def serve(deployment: str, root: Path, slots: int) -> Iterator[Served]:
    """The deployment with ``slots`` runs at once: a migrated database with an admin token, the API,
    and (production) ``slots`` Celery workers consuming the queue."""
    root.mkdir(parents=True, exist_ok=True)
    env = {
        "COLLAPIPE_THREADS_PER_RUN": "1",
        "COLLAPIPE_MAX_PARALLEL_RUNS": str(slots),
        "COLLAPIPE_ARTIFACT_DIR": str(root / "runs"),
        "COLLAPIPE_DATA_DIR": str(root / "data"),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
    }
    with contextlib.ExitStack() as stack:
        token, processes = deployment_processes(stack, deployment, root, env, "bench-studies")
        if deployment == "production":
            workers = [processes.start_worker(concurrency=1, loglevel="info") for _ in range(slots)]
            for worker in workers:
                wait_until(partial(_ready, worker), 120.0, worker.log, poll_s=0.1)
        port = free_port()
        start_api(processes, port, 1, [])
        yield Served(f"http://127.0.0.1:{port}", token, env["COLLAPIPE_DATABASE_URL"])


def _ready(worker: Service) -> bool:
    return " ready." in worker.log()


def _runs(served: Served, **where: Any) -> list[Run]:
    engine = make_engine(served.database_url)
    try:
        with make_session_factory(engine)() as session:
            query = select(Run).filter_by(**where).order_by(Run.id)
            return list(session.scalars(query))
    finally:
        engine.dispose()


def _wait_finished(served: Served, timeout_s: float, **where: Any) -> None:
    """Until no run matching ``where`` is queued or running; polls the database, not the API (whose
    study detail computes every cell's summary: a poll would cost the runs CPU)."""
    engine = make_engine(served.database_url)
    unfinished = select(func.count()).select_from(Run).filter_by(**where)
    unfinished = unfinished.where(Run.status.in_(("queued", "running")))
    try:
        with engine.connect() as conn:

            def finished() -> bool:
                count = conn.execute(unfinished).scalar_one()
                conn.rollback()
                return bool(count == 0)

            wait_until(finished, timeout_s, poll_s=POLL_S)
    finally:
        engine.dispose()


def _seconds(start: datetime | None, end: datetime | None) -> float:
    assert start is not None and end is not None
    return (end - start).total_seconds()


def _config(rounds: int, policy: str, seed: int) -> dict[str, Any]:
    return tiny_config(training={"rounds": rounds}, scheduler={"policy": policy}, seed=seed)


def single_runs(served: Served, rounds: int, policies: list[str]) -> dict[str, dict[str, float]]:
    """One run per policy (seed 0), alone: its end-to-end, execution and start-delay seconds."""
    timings = {}
    with served.client() as client:
        for policy in policies:
            response = client.post("/api/runs", json={"config": _config(rounds, policy, 0)})
            assert response.status_code == 201, response.text
            run_id = response.json()["id"]
            _wait_finished(served, 300.0, id=run_id)
            (run,) = _runs(served, id=run_id)
            assert run.status == "succeeded", run.error
            timings[policy] = {
                "end_to_end_s": round(_seconds(run.created_at, run.finished_at), 3),
                "execution_s": round(_seconds(run.started_at, run.finished_at), 3),
                "start_delay_s": round(_seconds(run.created_at, run.started_at), 3),
            }
    return timings


def study(
    served: Served, rounds: int, policies: list[str], seeds: int, concurrency: int, name: str = "bench"
) -> dict[str, Any]:
    """The study's wall time (POST to the last run's finish, as stored) and its runs' own times."""
    body = {
        "name": name,
        "bases": [{"name": "tiny", "config": _config(rounds, policies[0], 0)}],
        "axes": [
            {"field": "scheduler.policy", "values": policies},
            {"field": "seed", "values": list(range(seeds))},
        ],
        "concurrency": concurrency,
    }
    with served.client() as client:
        response = client.post("/api/studies", json=body)
        assert response.status_code == 201, response.text
        study_id = response.json()["id"]
    _wait_finished(served, 3600.0, study_id=study_id)
    runs = _runs(served, study_id=study_id)
    assert all(r.status == "succeeded" for r in runs), [(r.id, r.status, r.error) for r in runs]
    created = min(r.created_at for r in runs)
    last = max(r.finished_at for r in runs if r.finished_at is not None)
    return {
        "num_runs": len(runs),
        "execution_s": [round(_seconds(r.started_at, r.finished_at), 3) for r in runs],
        "wall_s": round(_seconds(created, last), 3),
        "sum_execution_s": round(sum(_seconds(r.started_at, r.finished_at) for r in runs), 3),
        "mean_start_delay_s": round(sum(_seconds(r.created_at, r.started_at) for r in runs) / len(runs), 3),
    }


def measure(deployment: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    slots = min(args.slots, args.concurrency)
    with serve(deployment, root / deployment, args.slots) as served:
        # every worker process's first run pays its lazy set-up: not part of a run's time
        warm_up = study(served, args.rounds, args.policies[:1], 2 * args.slots, args.slots, "warm-up")
        load_single = load_average()
        single = single_runs(served, args.rounds, args.policies)
        load_study = load_average()
        measured = study(served, args.rounds, args.policies, args.seeds, args.concurrency)
    sum_single = args.seeds * sum(t["end_to_end_s"] for t in single.values())
    sum_execution = args.seeds * sum(t["execution_s"] for t in single.values())
    ideal = sum_single / slots
    measured_runs = measured.pop("execution_s")
    return {
        "slots": slots,
        "warm_up_execution_s": warm_up["execution_s"],
        "study_execution_s": {"min": min(measured_runs), "max": max(measured_runs)},
        "single_run": single,
        "sum_single_run_s": round(sum_single, 3),
        "sum_single_execution_s": round(sum_execution, 3),
        "study": {
            **measured,
            "ideal_s": round(ideal, 3),
            "ratio": round(measured["wall_s"] / ideal, 3),
            "ratio_to_execution": round(measured["wall_s"] / (sum_execution / slots), 3),
            "slot_occupancy": round(measured["sum_execution_s"] / (slots * measured["wall_s"]), 3),
        },
        "load_average": {"single_runs": load_single, "study": load_study, "end": load_average()},
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30, help="rounds per run")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per policy")
    parser.add_argument(
        "--policies",
        type=lambda text: text.split(","),
        default=["dssda", "uniform", "proportional", "fl", "myopic"],
        help="comma-separated policies (the study's other axis)",
    )
    parser.add_argument("--slots", type=int, default=2, help="local runs at once / Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="the study's concurrency")
    parser.add_argument("--only", choices=DEPLOYMENTS, help="measure one deployment")
    return parser.parse_args()


def _table(report: dict[str, Any]) -> str:
    names = [d for d in DEPLOYMENTS if d in report]
    rows: list[tuple[str, Callable[[dict[str, Any]], object]]] = [
        ("runs", lambda r: r["study"]["num_runs"]),
        ("slots = min(workers, concurrency)", lambda r: r["slots"]),
        ("Σ single-run times (s)", lambda r: r["sum_single_run_s"]),
        ("  of which execution (s)", lambda r: r["sum_single_execution_s"]),
        ("ideal = Σ / slots (s)", lambda r: r["study"]["ideal_s"]),
        ("study wall time (s)", lambda r: r["study"]["wall_s"]),
        (f"wall / ideal (goal <= {GOAL_RATIO})", lambda r: r["study"]["ratio"]),
        ("wall / (Σ execution / slots)", lambda r: r["study"]["ratio_to_execution"]),
        ("Σ execution in the study (s)", lambda r: r["study"]["sum_execution_s"]),
        ("slot occupancy", lambda r: r["study"]["slot_occupancy"]),
        ("mean start delay in the study (s)", lambda r: r["study"]["mean_start_delay_s"]),
        ("load average at the study", lambda r: r["load_average"]["study"]),
    ]
    lines = [f"{'':36}" + "".join(f"{n:>14}" for n in names)]
    lines += [f"{label:36}" + "".join(f"{value(report[n])!s:>14}" for n in names) for label, value in rows]
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    report: dict[str, Any] = {
        "args": vars(args),
        "cpus": os.cpu_count(),
        "load_average_at_start": load_average(),
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="collapipe-bench-studies-") as tmp:
        for deployment in DEPLOYMENTS:
            if args.only in (None, deployment):
                report[deployment] = measure(deployment, Path(tmp), args)
    report["goal_ratio"] = GOAL_RATIO
    report["bench_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))
    print(_table(report))


if __name__ == "__main__":
    main()
