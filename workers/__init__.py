"""Celery workers for CollaPipe: the worker and reaper processes' entry points.

- ``celery_app``: the worker's Celery app (configured by ``backend.runtime.celery_app``).
- ``tasks``: ``run_experiment(run_id)`` (``backend.runtime.execution.execute_run``) and the periodic
  ``reap_stale_runs``.
- ``context``: what a worker process holds (engine, run store with Redis wake-ups, dispatch ledger).
- ``reaper``: re-enqueues runs whose lease went stale and queued runs whose message was lost.

Never imports FastAPI (an import-linter contract checks it); the backend never imports it.
"""
