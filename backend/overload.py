"""ASGI middleware: at most ``max_in_flight`` requests of this API process are being served at once;
one more gets ``503`` at once, with ``Retry-After`` and the error code ``overloaded``, and nothing
of it runs.

So an API process never builds a backlog larger than ``max_in_flight``: under more load than it can
serve it answers the excess in well under a millisecond each instead of queueing it, and once the
load ends it is serving normally again within the time its last ``max_in_flight`` requests take
(a queue of requests waiting for worker threads and database connections took about a minute to
drain). The app's threadpool is sized from the same number (``backend.app``), so an admitted
request never waits for a thread while it holds a database connection.

Not counted (``is_exempt``): liveness and readiness probes (``/healthz`` answers without I/O,
``/readyz`` checks the database through a thread limiter of its own and says so when it is
starved), live streams (they last as long as a client watches; their database checks take threads
of their own limiter) and file uploads (a large upload streams for minutes without a thread).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from backend.body_guard import send_error

RETRY_AFTER_S = 1
# /api/runs/events, /api/runs/{id}/events, /api/studies/{id}/events
STREAM_PATH = re.compile(r"^/api/(runs|studies)/(\d+/)?events$")
PROBES = frozenset({"/healthz", "/readyz"})


def is_exempt(method: str, path: str) -> bool:
    """Whether a request is not counted: a probe, a live stream or a file upload."""
    upload = method == "PUT" and path.startswith("/api/files/")
    return path in PROBES or upload or STREAM_PATH.match(path) is not None


class InFlightLimit:
    def __init__(self, app: ASGIApp, max_in_flight: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # the event loop's thread only: no lock needed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_exempt(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            message = (
                f"the server is busy ({self.in_flight} requests in progress, the most it serves at once: "
                f"COLLAPIPE_MAX_REQUESTS_IN_FLIGHT); try again in {RETRY_AFTER_S} s"
            )
            await send_error(send, 503, "overloaded", message, headers={"Retry-After": str(RETRY_AFTER_S)})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
