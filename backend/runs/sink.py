"""``SqlRoundSink``: the core's RecordSink that stores each round in one fenced transaction.

Per round, in ONE transaction: renew the lease and raise ``rounds_done`` (only while the lease is
ours — otherwise ``LeaseLost`` and nothing is written), insert the round row and the device rows
with insert-or-ignore. After the commit, a round that was new is published on the live channel; a
round re-run after a crash (already in the DB) is not stored twice.

The publish gap: the commit and the publish cannot be one atomic step, so a crash (or a failed
publish) between them would leave the round in the database but not on the live stream. With a
``RoundLog`` channel (Redis Streams) the sink closes it: ``catch_up()`` — called when a run (re)starts
and before its final status — publishes every committed round above the stream's round mark, in
round order, and a publish that fails is logged and retried by catching up after the next commit.
The channel refuses a round it already carries, so a stream client gets each round exactly once.
Other channels get a plain publish after the commit (the embedded DB channel keeps the gap: a crash
between the two commits loses that live event, the round itself stays in the database).
"""

from __future__ import annotations

import logging
from typing import Any

from backend.db.base import utcnow
from backend.db.engine import SessionFactory
from backend.jsonsafe import sanitize
from backend.live.channel import ROUND, LiveChannel, RoundLog
from backend.metrics.ingest_repository import insert_round
from backend.metrics.repository import round_results_after
from backend.runs.lease_repository import renew_lease
from collapipe_core.records import RoundResult

log = logging.getLogger(__name__)

CATCH_UP_PAGE_ROUNDS = 200  # rounds read from the database per query while catching up


class LeaseLost(RuntimeError):
    """Another claimant took this run over (our lease expired); stop without writing."""


class SqlRoundSink:
    def __init__(
        self,
        session_factory: SessionFactory,
        run_id: int,
        claimant: str,
        channel: LiveChannel,
        lease_s: float,
    ) -> None:
        self.session_factory = session_factory
        self.run_id = run_id
        self.claimant = claimant
        self.channel = channel
        self.lease_s = lease_s
        self.rounds_inserted = 0
        self._behind = False  # a publish failed: the stream may lack committed rounds

    def write_round(self, result: RoundResult) -> None:
        with self.session_factory() as session:
            owned = renew_lease(
                session,
                self.run_id,
                self.claimant,
                utcnow(),
                self.lease_s,
                rounds_done=result.round.round + 1,
            )
            if not owned:
                session.rollback()
                raise LeaseLost(f"run {self.run_id}: lease of {self.claimant!r} was taken over")
            inserted = insert_round(session, self.run_id, result)
            session.commit()
        if not inserted:
            return
        self.rounds_inserted += 1
        payload = sanitize(result.to_json())
        if not isinstance(self.channel, RoundLog):
            self.channel.publish(self.run_id, ROUND, payload)
            return
        try:
            if self._behind:
                self.catch_up()
            else:
                self.channel.publish_round(self.run_id, result.round.round, payload)
        except Exception:
            self.mark_behind()
            log.exception(
                "run %s: round %d is stored but its live event was not published; "
                "it is published after the next stored round or when the run ends",
                self.run_id,
                result.round.round,
            )

    def catch_up(self) -> int:
        """Publish every committed round the live stream does not carry yet, in order; how many.

        A no-op (0) for channels that are not a ``RoundLog``. Raises what the channel raises.
        """
        if not isinstance(self.channel, RoundLog):
            return 0
        published = 0
        after = self.channel.last_published_round(self.run_id)
        while True:
            with self.session_factory() as session:
                page: list[tuple[int, dict[str, Any]]] = round_results_after(
                    session, self.run_id, after, CATCH_UP_PAGE_ROUNDS
                )
            for round_index, payload in page:
                if self.channel.publish_round(self.run_id, round_index, sanitize(payload)) is not None:
                    published += 1
                after = round_index
            if len(page) < CATCH_UP_PAGE_ROUNDS:
                break
        self._behind = False
        if published:
            log.info("run %s: published %d stored round(s) missing from the stream", self.run_id, published)
        return published

    def mark_behind(self) -> None:
        """The stream may lack stored rounds: catch up after the next stored round."""
        self._behind = True

    def close(self) -> None:
        pass
