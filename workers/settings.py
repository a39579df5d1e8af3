"""Worker settings: the backend's ``Settings`` plus the knobs only the Celery side has.

One object per process, read from the environment (prefix ``COLLAPIPE_``) like the backend's.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field

from backend.settings import Settings


class WorkerSettings(Settings):
    visibility_timeout_s: float = Field(
        default=12 * 3600.0,
        gt=0,
        description="Redis broker: an unacknowledged message is redelivered after this long; "
        "keep it above the longest run (a shorter one only adds harmless 'skipped' duplicates)",
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
        description="prepended to every Redis key (queue, streams, marks): several deployments, or test "
        "sessions, can share one Redis database",
    )
    stream_maxlen: int = Field(
        default=10_000, ge=100, description="events kept per run stream (XADD MAXLEN ~); the DB keeps all"
    )
    stream_max_readers: int = Field(
        default=1000,
        ge=1,
        description="SSE streams one API process reads from Redis at once (each waiting stream holds a "
        "connection); more wait for a free one",
    )
    stream_ttl_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, description="a run's live stream expires this long after its last one"
    )

    def torch_threads(self) -> int:
        """Torch threads per worker process: ``threads_per_run`` or 1 (concurrency gives parallelism)."""
        return self.threads_per_run or 1


@lru_cache(maxsize=1)
def get_worker_settings() -> WorkerSettings:
    """The process's settings (read once)."""
    return WorkerSettings()


def worker_settings_from(settings: Settings) -> WorkerSettings:
    """Worker settings extending the API's ``settings`` (the worker-only fields come from the env)."""
    if isinstance(settings, WorkerSettings):
        return settings
    return WorkerSettings(**settings.model_dump())
