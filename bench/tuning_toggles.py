"""The API with some request-path optimisations switched off, for bench/service.py's ``--ablate``.

``create_app`` is a uvicorn factory (``uvicorn bench.tuning_toggles:create_app --factory``): it
reads ``COLLAPIPE_BENCH_WITHOUT`` (comma-separated names of ``TOGGLES``), replaces each named
optimisation in this process by the plain code it stands for, then builds ``backend.app.create_app``.
Nothing in the backend is changed on disk; without the variable the app is the production one.

- ``gc_tuning``: no ``gc.freeze`` / raised young threshold after start-up (``backend/gc_tuning.py``).
- ``autocommit_reads``: GET requests in transactions like every other request
  (``make_read_session_factory`` in ``backend/db/engine.py``, used by ``backend/deps.py``).
- ``series_cache``: every round-series request reads and downsamples the rounds; no watermark query,
  no per-process cache of bodies (``backend/metrics/series_cache.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

ENV = "COLLAPIPE_BENCH_WITHOUT"


def _without_gc_tuning() -> None:
    import backend.app

    backend.app.settle_after_startup = lambda: None


def _without_autocommit_reads() -> None:
    import backend.app
    from backend.db.engine import make_session_factory

    backend.app.make_read_session_factory = make_session_factory


def _without_series_cache() -> None:
    from backend.metrics import service

    def uncached_body(
        session: Any, _cache: Any, run_id: int, fields: Any, from_round: Any, to_round: Any, *rest: Any
    ) -> bytes:
        series = service.round_series(session, run_id, fields, from_round, to_round, *rest)
        return series.model_dump_json().encode()

    service.round_series_body = uncached_body


TOGGLES: dict[str, Callable[[], None]] = {
    "gc_tuning": _without_gc_tuning,
    "autocommit_reads": _without_autocommit_reads,
    "series_cache": _without_series_cache,
}


def parse(text: str) -> list[str]:
    """Names from a comma-separated list; ValueError naming an unknown one and the known ones."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in TOGGLES]
    if unknown:
        raise ValueError(f"unknown optimisation(s) {unknown}: choose from {', '.join(TOGGLES)}")
    return names


def create_app() -> FastAPI:
    for name in parse(os.environ.get(ENV, "")):
        TOGGLES[name]()
    from backend.app import create_app as create_backend_app

    return create_backend_app()
