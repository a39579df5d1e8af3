"""The runs listing's latest figures as columns of ``runs``: the latest round (``rounds_done - 1``) and
its latency, the latest evaluated round and its eval loss, perplexity and accuracy.

The listing joined every listed run's latest and latest evaluated round and read the eval metrics
out of the round's JSON record on every request (several milliseconds of database time for 50
runs). Storing a round now copies them to its run (``copy_latest_figures`` in
``backend.runtime.repository``); this fills them for the rounds stored before, with the expressions
the listing used.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("latest_round", sa.Integer()),
    ("latest_latency_s", sa.Float()),
    ("latest_eval_round", sa.Integer()),
    ("latest_eval_loss", sa.Float()),
    ("latest_eval_perplexity", sa.Float()),
    ("latest_eval_accuracy", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))

    keys = (("id", sa.Integer()), ("rounds_done", sa.Integer()), *COLUMNS)
    runs = sa.table("runs", *(sa.column(name, kind) for name, kind in keys))

    def rounds_table(name: str) -> sa.TableClause:
        return sa.table(
            "round_metrics",
            sa.column("run_id", sa.Integer()),
            sa.column("round", sa.Integer()),
            sa.column("record", sa.JSON()),
            sa.column("latency_s", sa.Float()),
            sa.column("eval_loss", sa.Float()),
        ).alias(name)

    rounds, evaluated_rounds = rounds_table("stored"), rounds_table("evaluated")
    evaluated = (
        sa.select(sa.func.max(evaluated_rounds.c.round))
        .where(evaluated_rounds.c.run_id == runs.c.id, evaluated_rounds.c.eval_loss.is_not(None))
        .correlate(runs)
        .scalar_subquery()
    )

    def of_round(column: sa.ColumnElement[object], round_index: sa.ColumnElement[object]) -> object:
        return (
            sa.select(column)
            .where(rounds.c.run_id == runs.c.id, rounds.c.round == round_index)
            .correlate(runs)
            .scalar_subquery()
        )

    latest = runs.c.rounds_done - 1
    op.execute(
        runs.update().values(
            latest_round=of_round(rounds.c.round, latest),
            latest_latency_s=of_round(rounds.c.latency_s, latest),
            latest_eval_round=evaluated,
            latest_eval_loss=of_round(rounds.c.eval_loss, evaluated),
            latest_eval_perplexity=of_round(
                rounds.c.record[("eval_metrics", "eval_perplexity")].as_float(), evaluated
            ),
            latest_eval_accuracy=of_round(
                rounds.c.record[("eval_metrics", "eval_accuracy")].as_float(), evaluated
            ),
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, _kind in reversed(COLUMNS):
            batch_op.drop_column(name)
