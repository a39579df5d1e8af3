"""Migrations: empty → head → step by step down → empty → head, on SQLite and PostgreSQL; models match
(alembic check); 0002 fills the listing columns of runs stored before it from their configs; 0007
names the checkpoint file of runs checkpointed before it; after 0008 the database numbers live events
as they commit, events stored before keeping their ids (0009's backfill of the listing's latest
figures: tests/backend/runs/test_listing_figures.py).

Also: a SQLite migration runs with foreign keys off, so a batch rebuild of a parent table keeps the
child rows (they would be cascade-deleted with foreign keys on).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from backend.config_input import normalized
from backend.db.engine import make_engine
from backend.migrations import alembic_config, downgrade, upgrade_to_head
from collapipe_core.validation import parse_config
from tests.backend.builders import tiny_config
from tests.backend.databases import postgres_schema, sqlite_url

TABLES = {
    "users",
    "api_tokens",
    "sessions",
    "experiments",
    "runs",
    "round_metrics",
    "device_metrics",
    "run_events",
    "studies",
    "data_files",
    "alembic_version",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path, create_tables=False)
    else:
        with postgres_schema(request.getfixturevalue("pg_database"), create_tables=False) as url:
            yield url


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _columns(url: str, table: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {column["name"] for column in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_and_check(empty_database: str) -> None:
    upgrade_to_head(empty_database)
    assert _tables(empty_database) == TABLES
    command.check(alembic_config(empty_database))  # raises if models and migrations disagree
    downgrade(empty_database, "0008")
    assert "latest_latency_s" not in _columns(empty_database, "runs")
    downgrade(empty_database, "0007")
    assert "position" not in _columns(empty_database, "run_events")
    downgrade(empty_database, "0006")
    assert "checkpoint" not in _columns(empty_database, "runs")
    downgrade(empty_database, "0005")
    assert "data_files" not in _tables(empty_database)
    assert "last_used_at" not in _columns(empty_database, "sessions")
    downgrade(empty_database, "0004")
    assert "blocks_moved" not in _columns(empty_database, "round_metrics")
    assert "gradient_noise_scale" in _columns(empty_database, "round_metrics")
    downgrade(empty_database, "0003")
    assert "gradient_noise_scale" not in _columns(empty_database, "round_metrics")
    downgrade(empty_database, "0002")
    assert "studies" not in _tables(empty_database)
    assert "study_id" not in _columns(empty_database, "runs")
    downgrade(empty_database, "0001")
    assert "v" not in _columns(empty_database, "runs")
    downgrade(empty_database, "base")
    assert _tables(empty_database) <= {"alembic_version"}
    upgrade_to_head(empty_database)
    assert _tables(empty_database) == TABLES
    command.check(alembic_config(empty_database))


def test_listing_columns_are_backfilled_from_the_stored_config(empty_database: str) -> None:
    command.upgrade(alembic_config(empty_database), "0001")
    config = normalized(parse_config(tiny_config(scheduler={"V": 12.5}, network={"num_clusters": 3})))
    engine = make_engine(empty_database)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (id, name, config, status, created_at, rounds_done, total_rounds, "
                    "cancel_requested, attempt, policy, executor) "
                    "VALUES (1, 'r', :config, 'queued', '2026-01-01 00:00:00', 0, 5, false, 0, "
                    "'uniform', 'analytic')"
                ),
                {"config": json.dumps(config)},
            )
        upgrade_to_head(empty_database)
        with engine.connect() as connection:
            row = connection.execute(text("SELECT v, num_clusters, devices_per_cluster FROM runs")).one()
        assert tuple(row) == (12.5, 3, 3)
    finally:
        engine.dispose()


def test_runs_with_rounds_name_the_checkpoint_file_they_wrote_before_0007(empty_database: str) -> None:
    command.upgrade(alembic_config(empty_database), "0006")
    engine = make_engine(empty_database)
    try:
        with engine.begin() as connection:
            for run_id, rounds_done in ((1, 0), (2, 3)):
                connection.execute(
                    text(
                        "INSERT INTO runs (id, name, config, status, created_at, rounds_done, total_rounds, "
                        "cancel_requested, attempt, policy, executor, v, num_clusters, devices_per_cluster) "
                        "VALUES (:id, 'r', '{}', 'failed', '2026-01-01 00:00:00', :done, 5, false, 1, "
                        "'uniform', 'analytic', 1.0, 1, 1)"
                    ),
                    {"id": run_id, "done": rounds_done},
                )
        upgrade_to_head(empty_database)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, checkpoint FROM runs ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [(1, None), (2, "checkpoint.pt")]
    finally:
        engine.dispose()


def test_events_stored_before_0008_keep_their_ids_and_new_ones_follow_in_commit_order(
    empty_database: str,
) -> None:
    command.upgrade(alembic_config(empty_database), "0007")
    engine = make_engine(empty_database)
    insert_event = text(
        "INSERT INTO run_events (run_id, kind, data, created_at) VALUES (1, 'status', '{}', '2026-01-01')"
    )
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (id, name, config, status, created_at, rounds_done, total_rounds, "
                    "cancel_requested, attempt, policy, executor, v, num_clusters, devices_per_cluster) "
                    "VALUES (1, 'r', '{}', 'queued', '2026-01-01 00:00:00', 0, 5, false, 0, "
                    "'uniform', 'analytic', 1.0, 1, 1)"
                )
            )
            for _ in range(3):
                connection.execute(insert_event)
        upgrade_to_head(empty_database)
        with engine.begin() as connection:
            connection.execute(insert_event)  # the database numbers it as it commits
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, position FROM run_events ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    finally:
        engine.dispose()


def test_a_sqlite_batch_rebuild_of_runs_keeps_child_rows(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path, create_tables=False)
    upgrade_to_head(url)
    engine = make_engine(url)  # foreign_keys=ON like the app
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO runs (id, name, config, status, created_at, rounds_done, total_rounds, "
                    "cancel_requested, attempt, policy, executor, v, num_clusters, devices_per_cluster) "
                    "VALUES (1, 'r', '{}', 'queued', '2026-01-01 00:00:00', 0, 1, 0, 0, "
                    "'uniform', 'analytic', 1.0, 1, 1)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO round_metrics (run_id, round, record, latency_s, objective, created_at) "
                    "VALUES (1, 0, '{}', 1.0, 1.0, '2026-01-01 00:00:00')"
                )
            )
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")  # what alembic/env.py does
            context = MigrationContext.configure(connection, opts={"render_as_batch": True})
            with (
                Operations.context(context),
                Operations(context).batch_alter_table("runs", recreate="always"),
            ):
                pass
            connection.commit()
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM round_metrics")).scalar() == 1
    finally:
        engine.dispose()


def test_sqlite_never_reuses_the_id_of_a_deleted_run(tmp_path: Path) -> None:
    """Old links, exports and logs name a run by its id: a deleted run's id is not given again, on a
    database migrated from before the tables said AUTOINCREMENT (its rows keep their ids)."""
    url = sqlite_url(tmp_path, create_tables=False)
    command.upgrade(alembic_config(url), "0005")
    insert = text(
        "INSERT INTO runs (name, config, status, created_at, rounds_done, total_rounds, cancel_requested, "
        "attempt, policy, executor, v, num_clusters, devices_per_cluster) VALUES ('r', '{}', 'queued', "
        "'2026-01-01 00:00:00', 0, 1, 0, 0, 'uniform', 'analytic', 1.0, 1, 1) RETURNING id"
    )
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            assert [connection.execute(insert).scalar() for _ in range(3)] == [1, 2, 3]
        upgrade_to_head(url)
        with engine.begin() as connection:
            assert connection.execute(text("SELECT id FROM runs ORDER BY id")).scalars().all() == [1, 2, 3]
            connection.execute(text("DELETE FROM runs WHERE id = 3"))
            assert connection.execute(insert).scalar() == 4
            connection.execute(text("DELETE FROM runs WHERE id = 4"))
        with engine.begin() as connection:
            assert connection.execute(insert).scalar() == 5
    finally:
        engine.dispose()
