"""The file of each run's current checkpoint, ``runs.checkpoint``, named by the run's lease holder.

Runs checkpointed before it wrote one file, ``checkpoint.pt``, in their artifact directory: a run
with rounds names it (a missing or unreadable file makes the run replay from round 0 when resumed).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("checkpoint", sa.String(length=100), nullable=True))
    op.execute("UPDATE runs SET checkpoint = 'checkpoint.pt' WHERE rounds_done > 0")


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("checkpoint")
