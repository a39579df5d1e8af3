"""Live events numbered in commit order without a table lock: ``run_events.position``.

Event ids were serialised with ``LOCK TABLE run_events IN EXCLUSIVE MODE`` inside each round's
transaction, so one worker frozen inside it stalled every run's rounds and every launch. The SSE id
of an event is now its ``position``, which the database gives it when its transaction commits:
PostgreSQL in a deferred constraint trigger under a transaction-scoped advisory lock (held only while
the server executes the COMMIT), SQLite (one writer at a time) as the row's id. Existing events keep
their ids as positions, so clients resume where they were.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LOCK = 7_151_023_977


def upgrade() -> None:
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("position", sa.BigInteger(), nullable=True))
    op.execute("UPDATE run_events SET position = id")
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.drop_index("ix_run_events_run_id_id")
        batch_op.drop_index("ix_run_events_kind_id")
        batch_op.create_index("ix_run_events_position", ["position"], unique=True)
        batch_op.create_index("ix_run_events_run_id_position", ["run_id", "position"], unique=False)
        batch_op.create_index("ix_run_events_kind_position", ["kind", "position"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE SEQUENCE run_events_position_seq OWNED BY run_events.position")
        op.execute(
            "SELECT setval('run_events_position_seq', "
            "COALESCE((SELECT max(position) FROM run_events), 0) + 1, false)"
        )
        op.execute(
            f"""CREATE FUNCTION run_events_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK});
    UPDATE run_events SET position = nextval('run_events_position_seq') WHERE id = NEW.id;
    RETURN NULL;
END $$"""
        )
        op.execute(
            "CREATE CONSTRAINT TRIGGER run_events_position AFTER INSERT ON run_events "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION run_events_number()"
        )
    else:
        op.execute(
            "CREATE TRIGGER run_events_position AFTER INSERT ON run_events FOR EACH ROW "
            "BEGIN UPDATE run_events SET position = NEW.id WHERE id = NEW.id; END"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER run_events_position ON run_events")
        op.execute("DROP FUNCTION run_events_number()")
    else:
        op.execute("DROP TRIGGER run_events_position")
    # a rebuild on SQLite: ids stay never reused
    with op.batch_alter_table(
        "run_events", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_index("ix_run_events_kind_position")
        batch_op.drop_index("ix_run_events_run_id_position")
        batch_op.drop_index("ix_run_events_position")
        batch_op.create_index("ix_run_events_kind_id", ["kind", "id"], unique=False)
        batch_op.create_index("ix_run_events_run_id_id", ["run_id", "id"], unique=False)
        batch_op.drop_column("position")  # drops the sequence it owns on PostgreSQL
