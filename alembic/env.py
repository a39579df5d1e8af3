"""Alembic environment for SQLite and PostgreSQL.

- URL: ``-x database_url=...``, else the ``sqlalchemy.url`` set by the caller (backend.migrations),
  else ``COLLAPIPE_DATABASE_URL`` through backend.settings.
- ``render_as_batch=True`` always, so every generated script also runs on SQLite (table rebuilds).
- On SQLite, foreign keys are switched OFF for the migration: a batch rebuild of a parent table
  (runs) would otherwise cascade-delete every child row (round_metrics, device_metrics, run_events).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import engine_from_config, pool

from backend.db import models  # noqa: F401  (registers the tables)
from backend.db.base import Base
from backend.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("database_url") or config.get_main_option(
        "sqlalchemy.url"
    )
    return url or Settings().database_url


def render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    """Render the models' UtcDateTime as a plain timezone-aware DateTime: scripts import no app code."""
    from backend.db.base import UtcDateTime

    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_migrations_offline() -> None:
    context.configure(
        url=_database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_server_default=True,
        render_item=render_item,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is None:
        engine = engine_from_config(
            {"sqlalchemy.url": _database_url()}, prefix="sqlalchemy.", poolclass=pool.NullPool
        )
        with engine.connect() as connection:
            _run(connection)
        engine.dispose()
    else:
        _run(connectable)


def _run(connection: object) -> None:
    from sqlalchemy.engine import Connection

    assert isinstance(connection, Connection)
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_server_default=True,
        render_item=render_item,
    )
    with context.begin_transaction():
        context.run_migrations()
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
