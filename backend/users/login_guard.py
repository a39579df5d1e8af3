"""Throttling of password guessing, and a bound on concurrent password checks.

- Failed password checks are counted per username and per client address over a sliding window
  (``window_s``). A username with ``failures_per_user`` failures in the window, or an address with
  ``failures_per_client``, is locked: every login for it, even with the right password, gets 429
  with ``Retry-After`` until the lockout ends. Each further lockout of the same key lasts twice the
  previous one (up to ``max_lockout_s``); a successful login forgets the username's failures and
  lockouts, and a key idle for ``max_lockout_s`` is forgotten.
- At most ``max_concurrent`` password checks (argon2: 64 MiB and most of a core each) run at once;
  a login beyond that gets 429 at once instead of queueing, so a flood of logins cannot take the
  CPU and memory from everyone else.

State is in memory, per API process (several processes each count their own share).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from backend.errors import TooManyRequests

MAX_TRACKED = 10_000  # keys kept per kind; beyond it the idle ones, then the oldest, are forgotten


@dataclass
class _Failures:
    times: deque[float] = field(default_factory=deque)
    locked_until: float = 0.0
    lockouts: int = 0
    last_seen: float = 0.0


class _Counter:
    def __init__(self, limit: int, window_s: float, max_lockout_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_lockout_s = max_lockout_s
        self.entries: dict[str, _Failures] = {}

    def retry_after(self, key: str, now: float) -> float:
        entry = self.entries.get(key)
        return 0.0 if entry is None else max(0.0, entry.locked_until - now)

    def fail(self, key: str, now: float) -> None:
        entry = self.entries.get(key)
        if entry is None or now - entry.last_seen > self.max_lockout_s:
            entry = self.entries[key] = _Failures()
        entry.last_seen = now
        entry.times.append(now)
        while entry.times and now - entry.times[0] >= self.window_s:
            entry.times.popleft()
        if len(entry.times) >= self.limit:
            entry.lockouts += 1
            entry.locked_until = now + min(self.window_s * 2 ** (entry.lockouts - 1), self.max_lockout_s)
            entry.times.clear()
        if len(self.entries) > MAX_TRACKED:
            self._forget(now)

    def forget(self, key: str) -> None:
        self.entries.pop(key, None)

    def _forget(self, now: float) -> None:
        for key, entry in list(self.entries.items()):
            if now - entry.last_seen > self.window_s and entry.locked_until <= now:
                del self.entries[key]
        overflow = len(self.entries) - MAX_TRACKED
        if overflow > 0:
            for key in sorted(self.entries, key=lambda k: self.entries[k].last_seen)[:overflow]:
                del self.entries[key]


class LoginGuard:
    def __init__(
        self,
        *,
        failures_per_user: int,
        failures_per_client: int,
        window_s: float,
        max_lockout_s: float,
        max_concurrent: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = _Counter(failures_per_user, window_s, max_lockout_s)
        self._clients = _Counter(failures_per_client, window_s, max_lockout_s)
        self._lock = threading.Lock()
        self._checks = threading.BoundedSemaphore(max_concurrent)
        self._clock = clock

    def check(self, client: str, username: str) -> None:
        """TooManyRequests while the username or the client address is locked."""
        with self._lock:
            now = self._clock()
            wait = max(self._users.retry_after(username, now), self._clients.retry_after(client, now))
        if wait > 0:
            raise TooManyRequests(
                f"too many failed logins for this username or from this address; try again in "
                f"{math.ceil(wait)} s",
                math.ceil(wait),
            )

    def failed(self, client: str, username: str) -> None:
        with self._lock:
            now = self._clock()
            self._users.fail(username, now)
            self._clients.fail(client, now)

    def succeeded(self, client: str, username: str) -> None:
        with self._lock:
            self._users.forget(username)

    @contextmanager
    def checking(self) -> Iterator[None]:
        """Hold one of the ``max_concurrent`` password-check slots; TooManyRequests if none is free."""
        if not self._checks.acquire(blocking=False):
            raise TooManyRequests("the server is checking too many passwords at once; try again in 1 s", 1)
        try:
            yield
        finally:
            self._checks.release()

    def tracked(self) -> int:
        """How many usernames and addresses are remembered (bounded)."""
        with self._lock:
            return len(self._users.entries) + len(self._clients.entries)
