"""Celery workers for CollaPipe: thin adapters from a queued run id to ``backend.runs.execution``.

- ``celery_app``: the Celery app (broker on Redis, acks late, one message per worker process).
- ``tasks``: ``run_experiment(run_id)`` and the periodic ``reap_stale_runs``.
- ``redis_channel``: the live channel on Redis Streams (one stream per run plus the status stream).
- ``executor``: the API's ``RunDispatcher`` for ``COLLAPIPE_EXECUTOR=celery``.
- ``reaper``: re-enqueues runs whose lease went stale and queued runs whose message was lost.

Never imports FastAPI (an import-linter contract checks it).
"""
