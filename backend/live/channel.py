"""The live channel: a per-run, replayable, ordered event stream read by the SSE endpoints.

Events are written by the run lifecycle (``backend.runtime.lifecycle``) into the outbox table
``run_events``, in the same transaction as the state they report; the channel only reads them
(``backend.live.outbox.OutboxChannel``, in both deployments). Semantics
(tests/backend/live/test_outbox.py checks them):

- ``read(run_id, after, block_s)`` returns the events after id ``after`` (``None``: from the start)
  in commit order, waiting up to ``block_s`` seconds when there are none yet (an empty list then);
  a malformed ``after`` raises ValueError (before any waiting). ``run_id=None`` reads the status
  events of every run; a frozenset of run ids reads every event of those runs (a study's).
- ``validate_id(after)`` raises ValueError unless ``after`` could be an id of this channel's streams
  (well formed and in range; it need not exist).
- ``head(run_id)`` is the id of the latest event (``"0"`` when there is none): a client that wants
  only new events starts reading after it.
- Ids are the outbox events' positions (integers given in commit order) as strings, increasing;
  SSE sends them as ``id:`` lines and a reconnecting client's ``Last-Event-ID`` goes back in as
  ``after``. Every event is delivered once to a reader that resumes after the last id it saw.

Event kinds and payloads (``data`` is plain JSON):

- ``"round"``: ``RoundResult.to_json()`` of a newly stored round — ``{"round": {...}, "devices": [...]}``;
  a round of more than ``lifecycle.ROUND_EVENT_DEVICES`` devices carries its first ones and
  ``"devices_total"`` (GET /api/runs/{id}/rounds/{round}/devices serves them all).
- ``"status"``: ``{"run_id", "status", "rounds_done", "total_rounds", "error"}``; a status in
  TERMINAL_STATUSES ends a run's SSE stream unless the run was re-queued since.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

ROUND = "round"
STATUS = "status"
MAX_EVENT_ID = 2**63 - 1  # event ids are BIGINT-sized integers

Selector = int | frozenset[int] | None
"""Whose events a read returns: one run's, a set of runs' (every kind), or (None) every run's status."""


def parse_integer_id(after: str | None) -> int:
    """An event id (``None``: 0, the start); ValueError naming the id for anything else."""
    if after is None:
        return 0
    if not (after.isascii() and after.isdigit()) or len(after) > 19 or int(after) > MAX_EVENT_ID:
        raise ValueError(
            f"event id {after[:40]!r} is not an id of this stream (an integer from 0 to {MAX_EVENT_ID})"
        )
    return int(after)


@dataclass(frozen=True)
class LiveEvent:
    id: str
    run_id: int
    kind: str
    data: dict[str, Any]


class LiveChannel(Protocol):
    async def read(self, run_id: Selector, after: str | None, block_s: float) -> list[LiveEvent]: ...

    async def head(self, run_id: Selector) -> str: ...

    def validate_id(self, after: str) -> None: ...

    async def aclose(self) -> None: ...
