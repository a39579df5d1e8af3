"""The two deployments the API and browser suites run on, and their pytest parameters.

``embedded``: SQLite, the local runner, live readers polling the outbox (what ``collapipe serve`` uses).
``production``: PostgreSQL, live readers woken through Redis and a real Celery worker; its tests carry
the real-server markers. ``@pytest.mark.deployments("embedded")`` limits a test to the deployments named.
"""

from __future__ import annotations

from typing import Any

import pytest

EMBEDDED = "embedded"
PRODUCTION = "production"
DEPLOYMENTS = (EMBEDDED, PRODUCTION)
PRODUCTION_MARKS = (pytest.mark.postgres, pytest.mark.redis, pytest.mark.celery)


def deployment_params(metafunc: pytest.Metafunc) -> list[Any]:
    """One parameter per deployment the test runs on (all, or those its ``deployments`` marker names)."""
    marker = metafunc.definition.get_closest_marker("deployments")
    names = marker.args if marker is not None else DEPLOYMENTS
    unknown = sorted(set(names) - set(DEPLOYMENTS))
    if unknown:
        raise ValueError(f"@pytest.mark.deployments{names!r}: unknown {unknown}; choose from {DEPLOYMENTS}")
    return [pytest.param(n, marks=PRODUCTION_MARKS if n == PRODUCTION else ()) for n in names]
