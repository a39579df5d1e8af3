"""The runs listing's latest figures are columns of the run, kept as rounds are stored; the listing
shows what it showed when it joined the rounds on every request.

Runs record rounds through the run lifecycle in the ways a run can: in order, a round stored again
after a crash (with other figures: the first record stays), a resumed run re-running earlier
rounds, evaluations every other round with and without perplexity or accuracy, a metric that is not
a finite number. On the same database the listing is read three ways: as the service reads it now,
as it was read before the columns existed (the join of the rounds, on the schema before the
columns: migration 0008), and after migrating that database again (the columns backfilled); the
three agree, and agree with figures worked out from the stored rounds in Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.orm import Session, sessionmaker

from backend.db.base import utcnow
from backend.db.engine import make_engine, make_session_factory
from backend.db.models import RoundMetric, Run
from backend.migrations import alembic_config, upgrade_to_head
from backend.runs import repository
from backend.runtime import lifecycle
from backend.runtime.lifecycle import Lease, RunStore
from collapipe_core.records import RoundRecord, RoundResult
from tests.backend.databases import postgres_schema, sqlite_url

LATEST = (
    "latest_round",
    "latest_latency_s",
    "latest_eval_round",
    "latest_eval_loss",
    "latest_eval_perplexity",
    "latest_eval_accuracy",
)
OWNER = "test:lease"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path, create_tables=False)
        upgrade_to_head(url)
        yield url
    else:
        with postgres_schema(request.getfixturevalue("pg_database"), create_tables=False) as url:
            upgrade_to_head(url)
            yield url


def _round(index: int, latency_s: float, **evaluation: Any) -> RoundResult:
    record = RoundRecord(
        round=index,
        policy="uniform",
        latency_s=latency_s,
        aggregation_s=0.0,
        objective=1.0,
        objective_latency=1.0,
        objective_convergence=0.0,
        objective_energy=0.0,
        convergence=0.0,
        num_microbatches=[2],
        makespan_s=[latency_s],
        bubble_fraction=[0.1],
        solve_time_s=0.0,
        solver_iterations=1,
        feasible=True,
        violations=[],
    )
    if evaluation:
        metrics = {k: v for k, v in evaluation.items() if k != "eval_loss"}
        record = dataclasses.replace(record, eval_loss=evaluation["eval_loss"], eval_metrics=metrics)
    return RoundResult(record, ())


def _new_run(factory: sessionmaker[Session], name: str) -> Lease:
    with factory() as session:
        run = Run(
            name=name,
            config={},
            status="running",
            total_rounds=20,
            policy="uniform",
            executor="analytic",
            V=1.0,
            num_clusters=1,
            devices_per_cluster=1,
            lease_owner=OWNER,
            lease_expires_at=utcnow() + timedelta(hours=1),
            attempt=1,
        )
        session.add(run)
        session.commit()
        return Lease(run.id, OWNER, 3600.0)


def _store_runs(url: str) -> None:
    """Runs recording rounds through the lifecycle as runs do (see the module's docstring)."""
    engine = make_engine(url)
    factory = make_session_factory(engine)
    store = RunStore(factory)
    try:
        _new_run(factory, "queued, no round yet")
        steady = _new_run(factory, "steady")
        for n in range(6):
            evaluation = {"eval_loss": 3.0 / (n + 1), "eval_accuracy": n / 7} if n % 2 else {}
            lifecycle.record_round(store, steady, _round(n, 1.0 + n / 3, **evaluation))
        language_model = _new_run(factory, "language model, evaluated then not")
        lifecycle.record_round(
            store, language_model, _round(0, 0.7, eval_loss=4.1, eval_perplexity=60.3, eval_accuracy=0.1)
        )
        lifecycle.record_round(store, language_model, _round(1, 0.9))
        crashed = _new_run(factory, "round 2 stored again after a crash")
        for n in range(3):
            lifecycle.record_round(store, crashed, _round(n, 2.0 + n, eval_loss=1.0 / (n + 1)))
        lifecycle.record_round(store, crashed, _round(2, 99.0, eval_loss=0.001))  # ignored: stored
        resumed = _new_run(factory, "resumed from round 2 of 5")
        for n in range(5):
            lifecycle.record_round(store, resumed, _round(n, 0.5 + n, eval_loss=2.0 - n / 10))
        for n in range(2, 6):  # from its checkpoint at round 2: rounds 2..4 again, then round 5
            lifecycle.record_round(store, resumed, _round(n, 10.0 + n))
        not_finite = _new_run(factory, "a metric that is not a number")
        lifecycle.record_round(
            store, not_finite, _round(0, 0.3, eval_loss=0.5, eval_perplexity=math.inf, eval_accuracy=0.25)
        )
    finally:
        engine.dispose()


def _listing(url: str) -> dict[str, dict[str, Any]]:
    """The service's listing of every run: run name -> its latest figures."""
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            rows, total = repository.page(session, [], None, None, 100, 0)
    finally:
        engine.dispose()
    assert total == len(rows) == 6
    return {row.name: {key: getattr(row, key) for key in LATEST} for row in rows}


def _listing_by_join(url: str) -> dict[str, dict[str, Any]]:
    """The listing's figures as it read them before they were columns: each run's round
    ``rounds_done - 1`` and its latest evaluated round, joined, the eval metrics read from the
    round's JSON record."""
    runs = sa.table("runs", sa.column("id"), sa.column("name"), sa.column("rounds_done"))
    rounds = sa.table(
        "round_metrics",
        sa.column("run_id"),
        sa.column("round"),
        sa.column("latency_s"),
        sa.column("eval_loss"),
        sa.column("record", sa.JSON()),
    )
    latest, evaluated = rounds.alias("latest"), rounds.alias("evaluated")
    eval_round = (
        sa.select(sa.func.max(rounds.c.round))
        .where(rounds.c.run_id == runs.c.id, rounds.c.eval_loss.is_not(None))
        .scalar_subquery()
    )
    query = sa.select(
        runs.c.name,
        latest.c.round,
        latest.c.latency_s,
        evaluated.c.round,
        evaluated.c.eval_loss,
        evaluated.c.record[("eval_metrics", "eval_perplexity")].as_float(),
        evaluated.c.record[("eval_metrics", "eval_accuracy")].as_float(),
    ).select_from(
        runs.outerjoin(
            latest, sa.and_(latest.c.run_id == runs.c.id, latest.c.round == runs.c.rounds_done - 1)
        ).outerjoin(evaluated, sa.and_(evaluated.c.run_id == runs.c.id, evaluated.c.round == eval_round))
    )
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return {row[0]: dict(zip(LATEST, row[1:], strict=True)) for row in connection.execute(query)}
    finally:
        engine.dispose()


def _worked_out(url: str) -> dict[str, dict[str, Any]]:
    """The figures from the stored rows, in Python."""
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            runs = session.scalars(sa.select(Run)).all()
            stored = session.scalars(sa.select(RoundMetric)).all()
            figures = {}
            for run in runs:
                mine = {r.round: r for r in stored if r.run_id == run.id}
                last = mine.get(run.rounds_done - 1)
                evaluated = [r for r in mine.values() if r.eval_loss is not None]
                best = max(evaluated, key=lambda r: r.round) if evaluated else None
                metrics = best.record.get("eval_metrics", {}) if best else {}
                figures[run.name] = {
                    "latest_round": last.round if last else None,
                    "latest_latency_s": last.latency_s if last else None,
                    "latest_eval_round": best.round if best else None,
                    "latest_eval_loss": best.eval_loss if best else None,
                    "latest_eval_perplexity": metrics.get("eval_perplexity"),
                    "latest_eval_accuracy": metrics.get("eval_accuracy"),
                }
    finally:
        engine.dispose()
    return figures


def test_the_listing_shows_what_the_join_of_the_rounds_showed_before_and_after_migrating(
    database_url: str,
) -> None:
    _store_runs(database_url)
    now = _listing(database_url)
    assert now == _worked_out(database_url)
    assert now["resumed from round 2 of 5"] == {
        "latest_round": 5,
        "latest_latency_s": 15.0,
        "latest_eval_round": 4,  # rounds 2..4 again: stored already, they keep their first records
        "latest_eval_loss": 1.6,
        "latest_eval_perplexity": None,
        "latest_eval_accuracy": None,
    }
    assert now["round 2 stored again after a crash"]["latest_latency_s"] == 4.0
    assert now["a metric that is not a number"]["latest_eval_perplexity"] is None  # stored as null
    assert now["queued, no round yet"] == dict.fromkeys(LATEST)

    command.downgrade(alembic_config(database_url), "0008")  # the schema before the columns
    assert _listing_by_join(database_url) == now

    upgrade_to_head(database_url)  # the columns filled from the stored rounds
    assert _listing(database_url) == now
