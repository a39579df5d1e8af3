"""Ids never reused on SQLite, the last use of browser sessions, and the uploaders of data files.

- ``users``, ``api_tokens``, ``experiments``, ``runs`` and ``studies`` get SQLite's AUTOINCREMENT:
  without it SQLite gives a deleted row's id (the largest) to the next row, so old links and exports
  named another run. PostgreSQL's sequences never reuse ids: nothing changes there.
- ``sessions.last_used_at``: an idle session ends (existing sessions start with none: their
  creation counts as their last use).
- ``data_files``: who uploaded each file of the data directory, and its size (quotas, overwrite).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEVER_REUSED = ("users", "api_tokens", "experiments", "runs", "studies")


def _rebuild_sqlite_tables(autoincrement: bool) -> None:
    """Rebuild each table (SQLite only) with or without AUTOINCREMENT; its rows keep their ids."""
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in NEVER_REUSED:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild_sqlite_tables(autoincrement=True)
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "data_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=400), nullable=False),
        sa.Column("uploader_id", sa.Integer(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("uploaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["uploader_id"], ["users.id"], name=op.f("fk_data_files_uploader_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_data_files")),
        sa.UniqueConstraint("name", name=op.f("uq_data_files_name")),
    )
    with op.batch_alter_table("data_files", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_data_files_uploader_id"), ["uploader_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("data_files", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_data_files_uploader_id"))
    op.drop_table("data_files")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("last_used_at")
    _rebuild_sqlite_tables(autoincrement=False)
