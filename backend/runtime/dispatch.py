"""How the API hands a committed run to an executor: the ``RunDispatcher`` seam.

``LocalDispatcher`` (runtime/local.py) is the embedded default; ``CeleryRunExecutor``
(runtime/celery_dispatch.py) sends the run to the Celery workers. ``backend.composition`` chooses.
"""

from __future__ import annotations

from typing import Protocol


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
