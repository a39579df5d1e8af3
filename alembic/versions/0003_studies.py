"""Studies: the ``studies`` table, and each run's study and cell (``runs.study_id``, ``runs.study_cell``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("cells", sa.JSON(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("concurrency >= 1", name=op.f("ck_studies_concurrency")),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_studies_owner_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_studies")),
    )
    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_studies_name"), ["name"], unique=False)
        batch_op.create_index(batch_op.f("ix_studies_owner_id"), ["owner_id"], unique=False)

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("study_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("study_cell", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_study_id"), ["study_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_runs_study_id_studies"), "studies", ["study_id"], ["id"], ondelete="CASCADE"
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_runs_study_id_studies"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_runs_study_id"))
        batch_op.drop_column("study_cell")
        batch_op.drop_column("study_id")

    with op.batch_alter_table("studies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_studies_owner_id"))
        batch_op.drop_index(batch_op.f("ix_studies_name"))

    op.drop_table("studies")
