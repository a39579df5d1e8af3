"""When each API token and browser session was last used: noted in memory, written in batches.

A request only notes the time (a dictionary entry under a lock). ``flush`` writes every time noted
since the last flush in one short transaction of its own; the app calls it every ``FLUSH_INTERVAL_S``
and once at shutdown. So no request ever writes a last-use stamp: on SQLite a stamp inside a
request's transaction held the database's write lock for the whole request (other users' writes
waited, then failed with "database is locked"), and on PostgreSQL it held the token's row lock, so
concurrent requests on one token queued behind each other.

``last_used_at`` in the database is therefore up to ``FLUSH_INTERVAL_S`` old; ``seen`` gives the
time noted but not yet written (the idle timeout of sessions reads both). With several API processes
each notes and writes its own requests' times; the latest wins.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import datetime

from anyio import to_thread

from backend.db.engine import SessionFactory
from backend.users import repository as repo

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 30.0


class LastUse:
    def __init__(self, session_factory: SessionFactory) -> None:
        self._session_factory = session_factory
        self._lock = threading.Lock()
        self._tokens: dict[int, datetime] = {}
        self._sessions: dict[int, datetime] = {}

    def token_used(self, token_id: int, now: datetime) -> None:
        with self._lock:
            self._tokens[token_id] = now

    def session_used(self, session_id: int, now: datetime) -> None:
        with self._lock:
            self._sessions[session_id] = now

    def session_seen(self, session_id: int) -> datetime | None:
        """The session's last use noted by this process and not yet written, if any."""
        with self._lock:
            return self._sessions.get(session_id)

    def flush(self) -> None:
        """Write the times noted since the last flush (a short transaction); on failure they are kept
        for the next flush."""
        with self._lock:
            tokens, self._tokens = self._tokens, {}
            sessions, self._sessions = self._sessions, {}
        if not tokens and not sessions:
            return
        try:
            with self._session_factory() as session:
                repo.touch_tokens(session, tokens)
                repo.touch_sessions(session, sessions)
                session.commit()
        except Exception as err:
            log.warning("last-use stamps not written (kept for the next try): %s", err)
            with self._lock:
                for pending, failed in ((self._tokens, tokens), (self._sessions, sessions)):
                    for key, when in failed.items():
                        pending[key] = max(when, pending.get(key, when))

    async def flush_periodically(self, interval_s: float = FLUSH_INTERVAL_S) -> None:
        """Flush every ``interval_s`` until cancelled (a task of the app's lifespan)."""
        while True:
            await asyncio.sleep(interval_s)
            await to_thread.run_sync(self.flush)
