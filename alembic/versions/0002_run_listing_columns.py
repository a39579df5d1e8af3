"""Run listing columns: scheduler.V and the network's shape on ``runs``, backfilled from each run's
config; an index of evaluated rounds (the listing's latest eval figures).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVALUATED = "eval_loss IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("v", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("num_clusters", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("devices_per_cluster", sa.Integer(), nullable=True))

    # a stored config has every field explicit (backend.config_input.normalized)
    runs = sa.table(
        "runs",
        sa.column("config", sa.JSON()),
        sa.column("v", sa.Float()),
        sa.column("num_clusters", sa.Integer()),
        sa.column("devices_per_cluster", sa.Integer()),
    )
    op.execute(
        runs.update().values(
            v=runs.c.config[("scheduler", "V")].as_float(),
            num_clusters=runs.c.config[("network", "num_clusters")].as_integer(),
            devices_per_cluster=runs.c.config[("network", "devices_per_cluster")].as_integer(),
        )
    )

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.alter_column("v", existing_type=sa.Float(), nullable=False)
        batch_op.alter_column("num_clusters", existing_type=sa.Integer(), nullable=False)
        batch_op.alter_column("devices_per_cluster", existing_type=sa.Integer(), nullable=False)

    with op.batch_alter_table("round_metrics", schema=None) as batch_op:
        batch_op.create_index(
            "ix_round_metrics_evaluated",
            ["run_id", "round"],
            unique=False,
            sqlite_where=sa.text(EVALUATED),
            postgresql_where=sa.text(EVALUATED),
        )


def downgrade() -> None:
    with op.batch_alter_table("round_metrics", schema=None) as batch_op:
        batch_op.drop_index("ix_round_metrics_evaluated")

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("devices_per_cluster")
        batch_op.drop_column("num_clusters")
        batch_op.drop_column("v")
