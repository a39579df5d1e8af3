"""The TEBs whose optimizer state changed device in each round as a column, ``round_metrics.blocks_moved``.

Rounds stored before it have none (their records were written before the cost model charged block
moves and the redistribution of the averaged model), so the column starts empty and nothing is
backfilled.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-11 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("round_metrics", schema=None) as batch_op:
        batch_op.add_column(sa.Column("blocks_moved", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("round_metrics", schema=None) as batch_op:
        batch_op.drop_column("blocks_moved")
