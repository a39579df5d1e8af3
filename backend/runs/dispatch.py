"""How the API hands a committed run to an executor: the ``RunDispatcher`` seam.

``LocalDispatcher`` (runs/local_runner.py) is the embedded default. With ``executor = "celery"`` the
API builds its dispatcher and live channel from ``Settings.dispatcher_factory`` and
``Settings.channel_factory`` ("module:callable", each called with the Settings) — the workers package
provides them, and the backend never imports workers.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from backend.settings import Settings


class RunDispatcher(Protocol):
    async def start(self) -> None:
        """Begin dispatching (the app's startup); recover runs orphaned by a previous process."""

    async def stop(self) -> None:
        """Stop dispatching (the app's shutdown)."""

    def enqueue(self, run_id: int) -> None:
        """Hand over a run whose queued row is committed. Must not block for long; may be repeated."""

    def check_ready(self) -> str | None:
        """None when runs can be dispatched, else why not (readiness probe, e.g. broker unreachable)."""

    def queue_depth(self) -> int | None:
        """Runs waiting in the executor's own queue, if it has one (Prometheus); None otherwise."""


def load_factory(spec: str, setting: str) -> Any:
    """Import ``module:callable`` named by a setting; errors name the setting and the fix."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{setting} = {spec!r}: expected 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"{setting} = {spec!r}: cannot import {module_name!r} ({err})") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise ValueError(f"{setting} = {spec!r}: {module_name!r} has no attribute {attr!r}")
    return factory


def make_celery_dispatcher(settings: Settings) -> RunDispatcher:
    dispatcher: RunDispatcher = load_factory(settings.dispatcher_factory, "COLLAPIPE_DISPATCHER_FACTORY")(
        settings
    )
    return dispatcher
