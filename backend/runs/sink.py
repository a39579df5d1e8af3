"""``SqlRoundSink``: the core's RecordSink that stores each round in one fenced transaction.

Per round, in ONE transaction: renew the lease and raise ``rounds_done`` (only while the lease is
ours — otherwise ``LeaseLost`` and nothing is written), insert the round row and the device rows
with insert-or-ignore. After the commit, a round that was new is published on the live channel; a
round re-run after a crash (already in the DB) is neither stored nor published twice.
"""

from __future__ import annotations

from backend.db.base import utcnow
from backend.db.engine import SessionFactory
from backend.jsonsafe import sanitize
from backend.live.channel import ROUND, LiveChannel
from backend.metrics.ingest_repository import insert_round
from backend.runs.lease_repository import renew_lease
from collapipe_core.records import RoundResult


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
        if inserted:
            self.rounds_inserted += 1
            self.channel.publish(self.run_id, ROUND, sanitize(result.to_json()))

    def close(self) -> None:
        pass
