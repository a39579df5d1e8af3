"""The worker's Celery app: ``celery -A workers.celery_app worker -c N -P prefork``.

Settings come from the environment (``COLLAPIPE_REDIS_URL``, ``COLLAPIPE_DATABASE_URL``, ...); the
API process builds its own app from its settings in ``workers.executor`` instead of importing this.
"""

from __future__ import annotations

from workers.celery_config import create_celery_app
from workers.settings import get_worker_settings

app = create_celery_app(get_worker_settings())
