"""Who a request is: its API token or session cookie, checked against the database and then
remembered for ``ttl_s`` (``COLLAPIPE_AUTH_CACHE_S``, 2 s), so that a busy API process neither
queries the database nor takes a worker thread to recognise the same caller request after request.

A remembered caller still gets a session's end enforced on every request (an expired session is
refused at once), and every use is still noted for the last-use stamps (``LastUse``). Revoking a
token, ending sessions, changing a password or a role, deactivating or deleting a user through the
API makes this process forget every remembered credential as soon as the change commits
(``forget_all``, called after the commit by ``backend.users.service``); the other API processes
forget theirs within ``ttl_s``. ``ttl_s = 0`` checks the database on every request.

Only credentials found valid are remembered (at most ``MAX_REMEMBERED`` per process): an unknown or
revoked one is looked up again each time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from anyio import CapacityLimiter, to_thread
from sqlalchemy import inspect
from sqlalchemy.orm import Session, make_transient_to_detached

from backend.db.base import utcnow
from backend.db.engine import SessionFactory
from backend.db.models import User
from backend.users import repository as repo
from backend.users.last_use import LastUse
from backend.users.security import hash_secret

MAX_REMEMBERED = 10_000
_USER_FIELDS = tuple(attribute.key for attribute in inspect(User).column_attrs)

# bumped after every committed change of users, tokens or sessions (any app of this process)
_changes_lock = threading.Lock()
_changes = 0


def forget_all() -> None:
    """Every credential remembered in this process is checked against the database again."""
    global _changes
    with _changes_lock:
        _changes += 1


def _changes_now() -> int:
    with _changes_lock:
        return _changes


@dataclass(frozen=True)
class Credential:
    """How a request authenticates: an API token (``Authorization: Bearer``) or the session cookie."""

    kind: Literal["token", "cookie"]
    secret: str


@dataclass(frozen=True)
class Verified:
    """A credential found valid in the database: its user, its id and, for a session, its end."""

    user: User
    credential_id: int
    ends_at: datetime | None


def verify_token(session: Session, secret: str, last_use: LastUse) -> Verified | None:
    """The token's user, read from the database; None when it is unknown or revoked. Its use is
    noted in ``last_use`` (written later, outside the request's transaction)."""
    found = repo.token_with_user(session, hash_secret(secret))
    if found is None:
        return None
    user, token_id, revoked_at = found
    if revoked_at is not None:
        return None
    last_use.token_used(token_id, utcnow())
    return Verified(user, token_id, None)


def verify_session(session: Session, secret: str, last_use: LastUse, idle_s: float) -> Verified | None:
    """The browser session's user; None once it ended, expired or sat unused for more than
    ``idle_s``. Its use is noted in ``last_use``."""
    found = repo.get_session_by_hash(session, hash_secret(secret))
    now = utcnow()
    if found is None or found.expires_at < now:
        return None
    used = [t for t in (found.created_at, found.last_used_at, last_use.session_seen(found.id)) if t]
    if now - max(used) > timedelta(seconds=idle_s):
        return None
    user = repo.get_user(session, found.user_id)
    if user is None:
        return None
    last_use.session_used(found.id, now)
    return Verified(user, found.id, found.expires_at)


@dataclass(frozen=True)
class _Remembered:
    user: dict[str, Any]  # the user row's columns
    credential_id: int  # the token's or the browser session's id
    session_ends_at: datetime | None  # a browser session's end
    changes: int  # ``_changes`` when the database was read
    until: float  # time.monotonic() after which it is checked again


class Credentials:
    """The callers of one app (``app.state.credentials``)."""

    def __init__(self, session_factory: SessionFactory, last_use: LastUse, idle_s: float, ttl_s: float):
        self._session_factory = session_factory
        self._last_use = last_use
        self._idle_s = idle_s
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._remembered: dict[Credential, _Remembered] = {}

    async def caller(self, credential: Credential, limiter: CapacityLimiter | None = None) -> User | None:
        """The credential's user, or None (unknown, revoked, ended or idle session, deleted user).
        Checked in a worker thread of ``limiter`` (default: the app's threadpool) with a short
        database session of its own when not remembered."""
        found = self._recall(credential)
        if found is None:
            found = await to_thread.run_sync(self._check, credential, self._session_factory, limiter=limiter)
        return None if found is None else _user(found)

    async def caller_now(
        self, credential: Credential, session_factory: SessionFactory, limiter: CapacityLimiter | None = None
    ) -> User | None:
        """The credential's user read from the database now (a short session of ``session_factory``
        in a worker thread of ``limiter``), never from memory: for a long-lived stream's checks, so that
        access ended through any process ends the stream within one heartbeat."""
        found = await to_thread.run_sync(self._check, credential, session_factory, limiter=limiter)
        return None if found is None else _user(found)

    def _recall(self, credential: Credential) -> _Remembered | None:
        with self._lock:
            found = self._remembered.get(credential)
        if found is None or found.until < time.monotonic() or found.changes != _changes_now():
            return None
        now = utcnow()
        if found.session_ends_at is not None and found.session_ends_at < now:
            return None
        if credential.kind == "token":
            self._last_use.token_used(found.credential_id, now)
        else:
            self._last_use.session_used(found.credential_id, now)
        return found

    def _check(self, credential: Credential, session_factory: SessionFactory) -> _Remembered | None:
        changes = _changes_now()  # before reading: a change committed meanwhile voids what is read
        with session_factory() as session:
            if credential.kind == "token":
                verified = verify_token(session, credential.secret, self._last_use)
            else:
                verified = verify_session(session, credential.secret, self._last_use, self._idle_s)
            if verified is None:
                return None
            user = {name: getattr(verified.user, name) for name in _USER_FIELDS}
        found = _Remembered(
            user, verified.credential_id, verified.ends_at, changes, time.monotonic() + self._ttl_s
        )
        if self._ttl_s > 0:
            self._remember(credential, found)
        return found

    def _remember(self, credential: Credential, found: _Remembered) -> None:
        with self._lock:
            if len(self._remembered) >= MAX_REMEMBERED:
                now = time.monotonic()
                self._remembered = {k: v for k, v in self._remembered.items() if v.until >= now}
                if len(self._remembered) >= MAX_REMEMBERED:
                    self._remembered.clear()
            self._remembered[credential] = found


def _user(found: _Remembered) -> User:
    """A user object of the request's own (detached: not tied to any database session)."""
    user = User(**found.user)
    make_transient_to_detached(user)
    return user
