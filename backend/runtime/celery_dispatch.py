"""``CeleryRunExecutor``: the ``RunDispatcher`` of ``COLLAPIPE_EXECUTOR=celery`` (the API and the reaper).

``enqueue`` is called after the run's row is committed (``backend.db.transaction.after_commit``):
it marks the run in the dispatch ledger and sends ``run_experiment(run_id)`` with a task id made of
the run id and the attempt the message will start. Sending may be repeated: the run row's lease
makes every extra delivery a no-op.

Studies: every run of a study is sent when the study is created, and a worker whose claim is refused
because the study already runs ``concurrency`` runs returns ``"deferred"`` (the run stays queued, its
message is done). ``start_deferred`` is then called by the worker that ended a study's run (or
deferred one, after clearing that run's mark): it sends the study's runs that may start now and have
no message. Between the two of them every freed slot is handed over: the finisher sees the deferred
run's mark cleared, or the deferring worker sees the finished run. The reaper resends only runs that
may start, so a deferred run waits without messages going round.
"""

from __future__ import annotations

import secrets

import redis
from celery import Celery

from backend.db.engine import SessionFactory
from backend.runtime import lifecycle
from backend.runtime.celery_app import RUN_TASK, create_celery_app
from backend.runtime.dispatch_ledger import DispatchLedger
from backend.runtime.execution import Outcome
from backend.settings import Settings

FREES_A_SLOT: frozenset[Outcome] = frozenset({"succeeded", "failed", "cancelled", "deferred"})
"""Outcomes after which a run's study may have a queued run to start."""


MAX_STARTED = 1000  # runs one hand-over looks at (a study's concurrency is far below)


def task_id_for(run_id: int, attempt: int) -> str:
    """``run-<id>-attempt-<n>-<random>``: readable in logs and Flower, unique per message."""
    return f"run-{run_id}-attempt-{attempt}-{secrets.token_hex(3)}"


class CeleryRunExecutor:
    def __init__(
        self,
        app: Celery,
        session_factory: SessionFactory,
        ledger: DispatchLedger,
        queue: str,
        redis_client: redis.Redis,
        queue_key: str | None = None,
    ) -> None:
        self.app = app
        self.session_factory = session_factory
        self.ledger = ledger
        self.queue = queue
        self.redis = redis_client
        self.queue_key = queue_key or queue  # the Redis list kombu keeps the queue in

    @classmethod
    def from_settings(cls, settings: Settings, session_factory: SessionFactory) -> CeleryRunExecutor:
        client = redis.Redis.from_url(
            settings.redis_url, decode_responses=True, socket_timeout=5.0, socket_connect_timeout=5.0
        )
        return cls(
            create_celery_app(settings),
            session_factory,
            DispatchLedger(client, ttl_s=2 * settings.visibility_timeout_s, prefix=settings.redis_key_prefix),
            settings.run_queue,
            client,
            queue_key=settings.redis_key_prefix + settings.run_queue,
        )

    async def start(self) -> None:
        """Nothing to start: workers consume the queue and the reaper service recovers stale runs."""

    async def stop(self) -> None:
        self.app.close()
        self.redis.close()

    def enqueue(self, run_id: int) -> None:
        """Send ``run_experiment(run_id)``; the row must already be committed."""
        with self.session_factory() as session:
            attempt = (lifecycle.attempt_of(session, run_id) or 0) + 1
        task_id = task_id_for(run_id, attempt)
        self.ledger.mark(run_id, task_id)
        try:
            self.app.signature(RUN_TASK, args=(run_id,)).apply_async(task_id=task_id, queue=self.queue)
        except Exception:
            self.ledger.clear(run_id, task_id)  # the reaper resends runs without a mark
            raise

    def start_deferred(self, run_id: int, outcome: Outcome) -> list[int]:
        """After run ``run_id`` ended with ``outcome`` (its own mark cleared): send the runs of its
        study that may start now and have no message; their ids."""
        if outcome not in FREES_A_SLOT:
            return []
        store = lifecycle.RunStore(self.session_factory)
        study_id = lifecycle.study_of(store, run_id)
        if study_id is None:
            return []
        startable = lifecycle.startable_run_ids(store, MAX_STARTED, study_id=study_id)
        waiting = self.ledger.unmarked(startable)
        for waiting_id in waiting:
            self.enqueue(waiting_id)
        return waiting

    def check_ready(self) -> str | None:
        try:
            self.redis.ping()
        except redis.RedisError as err:
            return f"the Redis broker is unreachable ({err})"
        return None

    def queue_depth(self) -> int | None:
        try:
            return int(self.redis.llen(self.queue_key))
        except redis.RedisError:
            return None
