"""Which queued runs have a message waiting in the broker, so the reaper can resend lost ones.

``run:{id}:dispatched`` holds the task id of the run's latest message: set just before the message
is sent, deleted when that message's task returns (compare-and-delete, so a late duplicate never
clears a newer message's mark). While the mark is there, the message is in the broker or being
executed. A queued run without a mark has no message: its enqueue failed after the commit (broker
down), the broker lost its queue (Redis restarted without persistence), or its task ended without
claiming it (the database was unreachable).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

# delete the key only if it still names this task
_CLEAR_IF_OWNED = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def dispatch_key(run_id: int, prefix: str = "") -> str:
    return f"{prefix}run:{run_id}:dispatched"


class DispatchLedger:
    def __init__(self, client: redis.Redis, ttl_s: float = 48 * 3600.0, prefix: str = "") -> None:
        self.client = client
        self.ttl_s = ttl_s  # a safety net only: a stuck mark expires and the reaper resends the run
        self.prefix = prefix

    def mark(self, run_id: int, task_id: str) -> None:
        self.client.set(dispatch_key(run_id, self.prefix), task_id, ex=int(self.ttl_s))

    def clear(self, run_id: int, task_id: str) -> None:
        self.client.eval(_CLEAR_IF_OWNED, 1, dispatch_key(run_id, self.prefix), task_id)

    def unmarked(self, run_ids: Sequence[int]) -> list[int]:
        """The runs among ``run_ids`` that have no message waiting."""
        if not run_ids:
            return []
        marks = self.client.mget([dispatch_key(r, self.prefix) for r in run_ids])
        return [run_id for run_id, mark in zip(run_ids, marks, strict=True) if mark is None]

    def close(self) -> None:
        self.client.close()
