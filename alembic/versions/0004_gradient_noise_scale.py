"""The gradient noise scale of each round as a column, ``round_metrics.gradient_noise_scale``.

Rounds stored before it have none (their records were written before the executors measured it), so
the column starts empty and nothing is backfilled.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("round_metrics", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gradient_noise_scale", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("round_metrics", schema=None) as batch_op:
        batch_op.drop_column("gradient_noise_scale")
