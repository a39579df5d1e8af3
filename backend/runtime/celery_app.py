"""The Celery app factory (the API sends with it, the workers consume with it). Every setting that
makes a run survive crashes and duplicates is here.

Celery on Redis is at-least-once: a message is redelivered when its worker dies or when it stays
unacknowledged past ``visibility_timeout``, and a duplicate may run while the first copy still runs.
The run's lease (``lifecycle.claim`` in ``execute_run``) turns every duplicate into a quick
``"skipped"``; the reaper (``workers.reaper``) re-enqueues runs whose lease expired.
"""

from __future__ import annotations

from celery import Celery

from backend.settings import Settings

RUN_TASK = "collapipe.run_experiment"
REAP_TASK = "collapipe.reap_stale_runs"
MAINTENANCE_QUEUE = "collapipe.maintenance"


def celery_config(settings: Settings) -> dict[str, object]:
    """Celery settings for ``settings`` (see docs/deployment.md for why each one is set)."""
    return {
        "broker_url": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            # redelivery of a message left unacknowledged this long; above the longest run
            "visibility_timeout": settings.visibility_timeout_s,
            # how often workers sweep for such messages (kombu's default is ~100 s)
            "unacked_restore_interval": settings.redelivery_check_s,
            "unacked_restore_throttle": 1,
            # every kombu key (queues, unacked messages) under the deployment's prefix
            **({"global_keyprefix": settings.redis_key_prefix} if settings.redis_key_prefix else {}),
        },
        # no result backend: the runs table is the truth (duplicates would overwrite results)
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        # ack after the task returns; requeue when the process running it dies (SIGKILL, OOM)
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # a worker process reserves one message at a time: a long run never hoards queued ones
        "worker_prefetch_multiplier": 1,
        # a broker blip must not kill a run that is hours in: it keeps running under its lease
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "task_default_queue": settings.run_queue,
        "task_routes": {REAP_TASK: {"queue": MAINTENANCE_QUEUE}},
        "task_track_started": False,
        "worker_hijack_root_logger": False,
        "beat_schedule": {
            "reap-stale-runs": {"task": REAP_TASK, "schedule": settings.reaper_interval_s},
        },
    }


def create_celery_app(settings: Settings, include: tuple[str, ...] = ()) -> Celery:
    """A Celery app for ``settings``; worker processes ``include`` their task modules."""
    app = Celery("collapipe", include=list(include))
    app.conf.update(celery_config(settings))
    return app
