"""The worker's Celery app: ``celery -A workers.celery_app worker -c N -P prefork``.

Settings come from the environment (``COLLAPIPE_REDIS_URL``, ``COLLAPIPE_DATABASE_URL``, ...); the
API process builds its own app (without the tasks) in ``backend.runtime.celery_dispatch``.
"""

from __future__ import annotations

from backend.runtime.celery_app import create_celery_app
from workers.context import get_worker_settings

app = create_celery_app(get_worker_settings(), include=("workers.tasks",))
