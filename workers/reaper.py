"""The reaper: gives runs back to the workers when their worker is gone or their message was lost.

Each sweep:

1. ``lifecycle.requeue_stale``: running rows whose lease expired (the worker died, was SIGKILLed or
   lost the database) go back to ``queued`` with their ``status`` event; each gets a new message. The next
   worker to claim it resumes from the last committed round; a cancel requested meanwhile is
   honoured at that claim.
2. Lost messages: a queued run without a mark in the dispatch ledger has no message in the broker.
   It is resent once it has been seen unmarked on two sweeps in a row (an enqueue in progress
   between its commit and its mark is not mistaken for a lost one). Only runs that may start are
   looked at (``lifecycle.startable_run_ids``): a study's run deferred while the study runs its
   ``concurrency`` runs waits without a message until a slot frees (the worker that frees it sends
   it; if that worker died first, the run may start and this sweep resends it).

Sending twice is harmless (the lease makes extra deliveries ``"skipped"``), so several reapers may
run; one is enough. Run it as ``python -m workers.reaper`` (a loop) or with ``celery beat``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from dataclasses import dataclass, field
from types import FrameType

from backend.db.engine import EXECUTOR_LIMITS, make_engine, make_session_factory
from backend.runtime import lifecycle
from backend.runtime.celery_dispatch import CeleryRunExecutor
from backend.runtime.lifecycle import RunStore
from backend.runtime.redis_wake import RedisWake
from backend.settings import Settings
from workers.context import get_worker_settings

log = logging.getLogger(__name__)

MAX_QUEUED_CHECKED = 1000


@dataclass(frozen=True)
class SweepReport:
    requeued: list[int]  # stale running runs put back in the queue
    resent: list[int]  # queued runs whose message was lost


@dataclass
class Reaper:
    store: RunStore
    dispatcher: CeleryRunExecutor
    _suspects: set[int] = field(default_factory=set)

    def sweep(self) -> SweepReport:
        """One pass; every failure is logged and retried on the next pass."""
        requeued = self._requeue_stale()
        resent = self._resend_lost(exclude=set(requeued))
        return SweepReport(requeued, resent)

    def _requeue_stale(self) -> list[int]:
        rows = lifecycle.requeue_stale(self.store)
        for row in rows:
            log.warning(
                "run %s: lease expired at round %s of %s; re-queued",
                row.run_id,
                row.rounds_done,
                row.total_rounds,
            )
            self.dispatcher.enqueue(row.run_id)
        return [row.run_id for row in rows]

    def _resend_lost(self, exclude: set[int]) -> list[int]:
        startable = lifecycle.startable_run_ids(self.store, MAX_QUEUED_CHECKED)
        queued = [r for r in startable if r not in exclude]
        unmarked = self.dispatcher.ledger.unmarked(queued)
        lost = [r for r in unmarked if r in self._suspects]
        self._suspects = set(unmarked) - set(lost)
        for run_id in lost:
            log.warning("run %s: queued without a message in the broker; sent again", run_id)
            self.dispatcher.enqueue(run_id)
        return lost


def build_reaper(settings: Settings) -> Reaper:
    factory = make_session_factory(make_engine(settings.database_url, EXECUTOR_LIMITS))
    store = RunStore(factory, RedisWake(settings.redis_url, settings.redis_key_prefix))
    return Reaper(store, CeleryRunExecutor.from_settings(settings, factory))


_worker_reaper: Reaper | None = None


def reaper_for_worker() -> Reaper:
    """The process's reaper (the beat-driven task keeps its suspects between sweeps)."""
    global _worker_reaper
    if _worker_reaper is None:
        _worker_reaper = build_reaper(get_worker_settings())
    return _worker_reaper


def run_forever(reaper: Reaper, interval_s: float, stop: threading.Event) -> None:
    """Sweep every ``interval_s`` seconds until ``stop`` is set."""
    while not stop.is_set():
        try:
            report = reaper.sweep()
            if report.requeued or report.resent:
                log.info("reaper: requeued %s, resent %s", report.requeued, report.resent)
        except Exception:  # the database or Redis is down: keep going, the next sweep retries
            log.exception("reaper sweep failed")
        stop.wait(interval_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workers.reaper", description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=None, help="seconds between sweeps")
    parser.add_argument("--once", action="store_true", help="sweep once and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_worker_settings()
    reaper = build_reaper(settings)
    if args.once:
        print(reaper.sweep())
        return
    stop = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    interval = args.interval if args.interval is not None else settings.reaper_interval_s
    log.info("reaper: sweeping every %.1f s (lease %.1f s)", interval, settings.lease_s)
    run_forever(reaper, interval, stop)


if __name__ == "__main__":
    main()
