"""The service's tables (SQLAlchemy 2 typed models). Timestamps are aware UTC datetimes.

Metric rows keep the core's record JSON (``record``) and promote the numeric fields charts and
filters need into columns. Natural unique keys — (run_id, round) and (run_id, round, device_id) —
make a re-run round an idempotent insert.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    DDL,
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, UtcDateTime, utcnow

ROLES = ("viewer", "operator", "admin")
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL_STATUSES = ("succeeded", "failed", "cancelled")

DEVICE_METRIC_COLUMNS = (
    "num_blocks",
    "bandwidth_share",
    "power_w",
    "rate_bps",
    "compute_s",
    "comm_s",
    "idle_s",
    "energy_j",
    "queue",
    "memory_bytes",
    "memory_capacity_bytes",
    "energy_budget_j",
)
ROUND_METRIC_COLUMNS = (
    "latency_s",
    "objective",
    "train_loss",
    "eval_loss",
    "gradient_noise_scale",
    "blocks_moved",
)


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


# SQLite reuses the largest id after a delete unless a table says AUTOINCREMENT: ids that appear in
# links, exports and logs (users, tokens, experiments, runs, studies) must never name another row
NEVER_REUSED = {"sqlite_autoincrement": True}


class User(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(f"role IN ({_in(ROLES)})", name="role"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    must_change_password: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    @property
    def active(self) -> bool:
        """A deactivated user has no password (cannot log in) and no live session or token."""
        return self.password_hash is not None


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (NEVER_REUSED,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class BrowserSession(Base):
    """A login: the cookie holds a random secret, the table its SHA-256 (logout deletes the row).
    ``last_used_at`` (written in batches, backend.users.last_use) ends an idle session."""

    __tablename__ = "sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class Experiment(Base):
    __tablename__ = "experiments"
    __table_args__ = (NEVER_REUSED,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class Run(Base):
    """A run and its lease. ``replay_configs`` (forks): [{"until_round": k, "config": {...}}, ...] —
    the configs that produced rounds before each switch; ``config`` runs from the last switch on."""

    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(f"status IN ({_in(RUN_STATUSES)})", name="status"),
        Index("ix_runs_status_id", "status", "id"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    experiment_id: Mapped[int | None] = mapped_column(
        ForeignKey("experiments.id", ondelete="RESTRICT"), index=True
    )
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    replay_configs: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    rounds_done: Mapped[int] = mapped_column(Integer, default=0)
    total_rounds: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # the file (in the run's artifact directory) of its current checkpoint, named by its lease holder
    # once complete (backend.runtime.checkpoints)
    checkpoint: Mapped[str | None] = mapped_column(String(100))
    parent_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    fork_round: Mapped[int | None] = mapped_column(Integer)
    policy: Mapped[str] = mapped_column(String(200))
    executor: Mapped[str] = mapped_column(String(16))  # the config's fidelity: analytic | simulated
    # copied from the config at creation, so a listing reads columns instead of the config's JSON
    V: Mapped[float] = mapped_column("v", Float)  # scheduler.V
    num_clusters: Mapped[int] = mapped_column(Integer)  # network.num_clusters
    devices_per_cluster: Mapped[int] = mapped_column(Integer)  # network.devices_per_cluster
    # a run of a study: the study and the index of its cell (backend.studies); None for other runs
    study_id: Mapped[int | None] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    study_cell: Mapped[int | None] = mapped_column(Integer)
    # the listing's latest figures, copied from the stored rounds as each is stored (copy_latest_figures
    # in backend.runtime.repository): the round rounds_done - 1 and the latest evaluated round
    latest_round: Mapped[int | None] = mapped_column(Integer)
    latest_latency_s: Mapped[float | None] = mapped_column(Float)
    latest_eval_round: Mapped[int | None] = mapped_column(Integer)
    latest_eval_loss: Mapped[float | None] = mapped_column(Float)
    latest_eval_perplexity: Mapped[float | None] = mapped_column(Float)
    latest_eval_accuracy: Mapped[float | None] = mapped_column(Float)


EVALUATED = "eval_loss IS NOT NULL"


class RoundMetric(Base):
    __tablename__ = "round_metrics"
    __table_args__ = (
        UniqueConstraint("run_id", "round"),
        # a run's latest evaluated round in one index probe (the runs listing shows its eval figures)
        Index(
            "ix_round_metrics_evaluated",
            "run_id",
            "round",
            sqlite_where=text(EVALUATED),
            postgresql_where=text(EVALUATED),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    round: Mapped[int] = mapped_column(Integer)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    latency_s: Mapped[float] = mapped_column(Float)
    objective: Mapped[float] = mapped_column(Float)
    train_loss: Mapped[float | None] = mapped_column(Float)
    eval_loss: Mapped[float | None] = mapped_column(Float)
    gradient_noise_scale: Mapped[float | None] = mapped_column(Float)  # B_noise averaged (samples)
    blocks_moved: Mapped[int | None] = mapped_column(Integer)  # TEBs whose optimizer state changed device
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class DeviceMetric(Base):
    __tablename__ = "device_metrics"
    __table_args__ = (UniqueConstraint("run_id", "round", "device_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    round: Mapped[int] = mapped_column(Integer)
    cluster: Mapped[int] = mapped_column(Integer)
    device: Mapped[int] = mapped_column(Integer)
    device_id: Mapped[str] = mapped_column(String(32))
    profile: Mapped[str] = mapped_column(String(100))
    available: Mapped[bool] = mapped_column(Boolean)
    num_blocks: Mapped[int] = mapped_column(Integer)
    bandwidth_share: Mapped[float] = mapped_column(Float)
    power_w: Mapped[float] = mapped_column(Float)
    rate_bps: Mapped[float] = mapped_column(Float)
    compute_s: Mapped[float] = mapped_column(Float)
    comm_s: Mapped[float] = mapped_column(Float)
    idle_s: Mapped[float] = mapped_column(Float)
    energy_j: Mapped[float] = mapped_column(Float)
    queue: Mapped[float] = mapped_column(Float)
    memory_bytes: Mapped[float] = mapped_column(Float)
    memory_capacity_bytes: Mapped[float] = mapped_column(Float)
    energy_budget_j: Mapped[float] = mapped_column(Float)
    block_start: Mapped[int] = mapped_column(Integer)
    block_end: Mapped[int] = mapped_column(Integer)


class RunEvent(Base):
    """The outbox: every live event, written by the run lifecycle in the same transaction as the state
    it reports (backend.runtime.lifecycle); ``kind='status'`` rows also feed the stream of all runs'
    status changes. Kept as long as their run.

    ``position`` is the event's SSE id, given by the database when the event's transaction commits, in
    commit order and never reused, so a reader that has seen position N never later finds a smaller one
    committed (``OUTBOX_ORDER``). ``id`` only identifies the row."""

    __tablename__ = "run_events"
    __table_args__ = (
        Index("ix_run_events_position", "position", unique=True),
        Index("ix_run_events_run_id_position", "run_id", "position"),
        Index("ix_run_events_kind_position", "kind", "position"),
        {"sqlite_autoincrement": True},  # ids never reused: on SQLite the position is the id
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    position: Mapped[int | None] = mapped_column(BigInteger)  # None until committed


OUTBOX_ORDER_LOCK = 7_151_023_977
"""The key of the transaction-scoped advisory lock under which PostgreSQL numbers committed events."""

OUTBOX_ORDER: dict[str, tuple[str, ...]] = {
    # A deferred constraint trigger runs inside COMMIT, after the transaction's last statement: it
    # takes the advisory lock (released once the commit is visible) and draws each event's position,
    # so positions follow commit order. The lock is held only while the server executes the COMMIT:
    # a writer frozen between its statements (SIGSTOP, a long pause) holds it never, and delays no
    # other writer.
    "postgresql": (
        "CREATE SEQUENCE run_events_position_seq OWNED BY run_events.position",
        f"""CREATE FUNCTION run_events_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({OUTBOX_ORDER_LOCK});
    UPDATE run_events SET position = nextval('run_events_position_seq') WHERE id = NEW.id;
    RETURN NULL;
END $$""",
        "CREATE CONSTRAINT TRIGGER run_events_position AFTER INSERT ON run_events "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION run_events_number()",
    ),
    # SQLite serialises writers (a transaction holds the write lock from its first write to its
    # commit): ids commit in order, and the position is the id. A batch rebuild of run_events in a
    # migration drops this trigger: such a migration creates it again.
    "sqlite": (
        "CREATE TRIGGER run_events_position AFTER INSERT ON run_events FOR EACH ROW "
        "BEGIN UPDATE run_events SET position = NEW.id WHERE id = NEW.id; END",
    ),
}
for _dialect, _statements in OUTBOX_ORDER.items():
    for _statement in _statements:
        ddl = DDL(_statement).execute_if(dialect=_dialect)  # type: ignore[no-untyped-call]
        event.listen(RunEvent.__table__, "after_create", ddl)


class Study(Base):
    """Runs launched together over a grid of config values (backend.studies). ``definition`` is the
    request as stored (bases with their normalized configs, axes, mode, baseline); ``cells`` lists
    each cell's axis values. A study has no status of its own: it is derived from its runs."""

    __tablename__ = "studies"
    __table_args__ = (CheckConstraint("concurrency >= 1", name="concurrency"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    cells: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    concurrency: Mapped[int] = mapped_column(Integer)  # at most this many of its runs run at once
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class DataFile(Base):
    """A file uploaded into the data directory (backend.files): who uploaded it and its size, for
    the per-user quotas and the overwrite rule. ``name`` is the file's path under the data directory
    (``datasets/x.csv``, ``checkpoints/NAME/config.json``). Files placed on the disk by other means
    have no row."""

    __tablename__ = "data_files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(400), unique=True)
    uploader_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    uploaded_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
