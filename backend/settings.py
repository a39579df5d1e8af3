"""One ``Settings`` per process, read from the environment (prefix ``COLLAPIPE_``) or a ``.env`` file."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from collapipe_core.scheduler import PolicyRegistry
from collapipe_core.workspace import Workspace


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COLLAPIPE_", env_file=".env", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./collapipe.db",
        description="SQLAlchemy URL: sqlite:///FILE (embedded) or postgresql+psycopg://USER@HOST/DB",
    )
    executor: Literal["local", "celery"] = Field(
        default="local", description="local: one spawned process per run inside `serve`; celery: workers"
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="executor=celery: the broker and live wake-ups"
    )
    artifact_dir: Path = Field(
        default=Path("./runs"), description="checkpoints (run-<id>/); shared by every worker"
    )
    data_dir: Path = Field(
        default=Path("./data"),
        description="the only place configs read files from (network.trace_file names a file in it); "
        "mounted at the same path on every worker host",
    )
    policies: dict[str, str] = Field(
        default_factory=dict,
        description="policies configs may name besides the built-ins and the installed packages' "
        '"collapipe.policies" entry points: JSON {"name": "package.module:Class"}',
    )
    max_body_bytes: int = Field(
        default=1 * 2**20, ge=1024, description="largest request body; larger ones get 413 unread"
    )
    max_upload_bytes: int = Field(
        default=4 * 2**30,
        ge=1024,
        description="largest file uploaded into the data directory (PUT /api/files)",
    )
    max_user_data_bytes: int = Field(
        default=20 * 2**30,
        ge=0,
        description="most bytes of the data directory one user's uploads may hold (413 beyond)",
    )
    max_data_bytes: int = Field(
        default=200 * 2**30, ge=0, description="most bytes all uploads together may hold (413 beyond)"
    )
    max_data_files: int = Field(
        default=10_000, ge=0, description="most uploaded files the data directory may hold (409 beyond)"
    )
    min_free_disk_bytes: int = Field(
        default=2**30,
        ge=0,
        description="an upload must leave this much free on the data directory's disk (413 otherwise)",
    )
    max_file_bytes: int = Field(
        default=256 * 2**20,
        ge=1024,
        description="largest file a config may name (datasets, tokenizer files; a trace at most 8 MiB), "
        "checked before it is read",
    )
    max_export_bytes: int = Field(
        default=2 * 2**30,
        ge=1024,
        description="largest model archive GET /api/runs/{id}/model serves (413 beyond, checked on the "
        "weights before the export is built and on the archive after); the API process holds the model "
        "in memory while it builds the archive",
    )
    worker_memory_bytes: int | None = Field(
        default=None,
        ge=2**20,
        description="memory one run may use on a worker; runs modeled to need more are refused before "
        "launch (default: 80 % of this host's memory / max_parallel_runs)",
    )
    db_pool_size: int = Field(default=10, ge=1, le=1000, description="pooled database connections")
    db_max_overflow: int = Field(default=10, ge=0, le=1000, description="connections beyond the pool")
    max_requests_in_flight: int = Field(
        default=32,
        ge=1,
        le=10_000,
        description="requests one API process serves at once; one more gets 503 with Retry-After at once "
        "(probes, live streams and file uploads are not counted). The process's threadpool is sized from it",
    )
    auth_cache_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="an API token or session found valid is not looked up again for this long by the API "
        "process that checked it (a revocation through another API process takes effect within it); "
        "0 checks every request",
    )
    preflight_timeout_s: float = Field(
        default=10.0, gt=0, description="a pre-flight estimate still running after this is stopped (422)"
    )
    validate_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="checking a config (POST /api/config/validate, and before a pre-flight: reading its data "
        "files and building its model, in a child process of the API) still running after this is stopped "
        "(422)",
    )
    check_memory_bytes: int = Field(
        default=2 * 2**30,
        ge=64 * 2**20,
        description="memory the child processes that check configs and compute pre-flights may take beyond "
        "their code (an address-space limit); a check that needs more gets a 422",
    )
    readiness_timeout_s: float = Field(
        default=2.0, gt=0, description="/readyz: a database connection must be free within this"
    )
    host: str = Field(default="127.0.0.1", description="address `collapipe serve` binds")
    port: int = Field(default=8000, ge=1, le=65535)
    api_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="`collapipe serve`: API processes; more than 1 only with executor=celery",
    )
    bootstrap_token: SecretStr | None = Field(
        default=None, description="initial admin API token (stored hashed) for automation"
    )
    max_parallel_runs: int = Field(default=2, ge=1, description="local executor: runs at the same time")
    max_active_runs_per_user: int = Field(
        default=1000,
        ge=1,
        description="most runs one user may have queued or running, their studies' included (409 beyond)",
    )
    max_active_studies_per_user: int = Field(
        default=10, ge=1, description="most studies with unfinished runs one user may have (409 beyond)"
    )
    max_study_runs: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="most runs one study may create (its cells × seeds); a larger study is refused (422)",
    )
    threads_per_run: int | None = Field(
        default=None, ge=1, description="torch threads in each local run process (default: cores / runs)"
    )
    run_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="niceness added to the processes that execute runs (local run processes, Celery worker "
        "processes): on a host shared with the API, training then never delays the API or live streams; "
        "0 keeps the priority",
    )
    cookie_secure: bool | None = Field(
        default=None,
        description="Secure on the session cookie (the browser sends it over HTTPS only); default: on "
        "unless `host` is loopback. Set false only to serve browsers over plain HTTP on a trusted network",
    )
    session_ttl_s: float = Field(default=7 * 24 * 3600.0, gt=0, description="browser session lifetime")
    login_failures_per_user: int = Field(
        default=5,
        ge=1,
        description="failed logins for one username within login_window_s before it is locked",
    )
    login_failures_per_client: int = Field(
        default=20,
        ge=1,
        description="failed logins from one address within login_window_s before it is locked",
    )
    login_window_s: float = Field(
        default=60.0, gt=0, description="window of the failure counts, and the first lockout's length"
    )
    login_max_lockout_s: float = Field(
        default=900.0, gt=0, description="longest lockout (each further one doubles, up to this)"
    )
    login_max_concurrent: int = Field(
        default_factory=lambda: os.cpu_count() or 2,
        ge=1,
        description="password checks (argon2) at once; a login beyond them gets 429 (default: the cores)",
    )
    session_idle_s: float = Field(
        default=12 * 3600.0,
        ge=120,
        description="a browser session unused for this long ends (log in again); its use is recorded "
        "at most 30 s late",
    )
    lease_s: float = Field(default=60.0, gt=0, description="a run's lease; renewed every round and lease/3")
    dispatch_interval_s: float = Field(default=0.2, gt=0, description="local dispatcher tick")
    sse_poll_interval_s: float = Field(
        default=0.02,
        gt=0,
        description="embedded live streams: period of the one outbox poll while readers wait (with "
        "executor=celery readers are woken through Redis and poll once a second)",
    )
    sse_heartbeat_s: float = Field(default=15.0, gt=0, description="SSE keep-alive comment period")
    visibility_timeout_s: float = Field(
        default=12 * 3600.0,
        gt=0,
        description="executor=celery: an unacknowledged message is redelivered after this long; keep it "
        "above the longest run (a shorter one only adds harmless 'skipped' duplicates)",
    )
    redelivery_check_s: float = Field(
        default=60.0, gt=0, description="how often a worker looks for messages past their visibility timeout"
    )
    reaper_interval_s: float = Field(
        default=15.0, gt=0, description="reaper period: re-enqueue runs whose lease expired"
    )
    run_queue: str = Field(default="collapipe.runs", min_length=1, description="Celery queue of runs")
    redis_key_prefix: str = Field(
        default="",
        max_length=100,
        description="prepended to every Redis key (queue, dispatch marks, wake-up channel): several "
        "deployments, or test sessions, can share one Redis database",
    )

    @field_validator("policies")
    @classmethod
    def _registrable(cls, policies: dict[str, str]) -> dict[str, str]:
        PolicyRegistry(policies)  # raises ValueError naming a bad entry
        return policies

    def memory_limit_bytes(self) -> int:
        """``worker_memory_bytes``, or 80 % of this host's memory shared by ``max_parallel_runs`` runs."""
        if self.worker_memory_bytes is not None:
            return self.worker_memory_bytes
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(0.8 * physical / self.max_parallel_runs)

    def workspace(self) -> Workspace:
        """What a config may reach on this service: files in ``data_dir``, registered policies, memory."""
        return Workspace.service(
            self.data_dir,
            PolicyRegistry(self.policies),
            max_file_bytes=self.max_file_bytes,
            memory_limit_bytes=self.memory_limit_bytes(),
        )

    def torch_threads(self) -> int:
        """Torch threads per Celery worker process: ``threads_per_run`` or 1 (concurrency gives
        parallelism; small models on many threads per process are slower than on one)."""
        return self.threads_per_run or 1

    def session_cookie_secure(self) -> bool:
        """``cookie_secure``, or on unless the server listens on loopback only (a dashboard served on
        this machine over plain HTTP)."""
        return self.cookie_secure if self.cookie_secure is not None else not self.is_loopback()

    def is_loopback(self) -> bool:
        """Whether ``host`` only accepts connections from this machine."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
