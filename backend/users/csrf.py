"""ASGI middleware against cross-site request forgery, for requests that change something.

The session cookie is ``SameSite=Lax``, and SameSite treats every port (and every sibling subdomain)
of a host as the same site: a page served from another port of the same machine could make a
signed-in browser post to the API. So every POST, PUT, PATCH and DELETE under ``/api/``:

- with an ``Authorization`` header (an API token) passes: a browser never adds one by itself;
- with the session cookie must prove it comes from the dashboard: the header ``X-CollaPipe`` (the
  dashboard sends it on every request; a page of another origin cannot send a custom header without
  a CORS preflight, which this API never grants), or ``Sec-Fetch-Site: same-origin``, or an
  ``Origin`` — or, without one, a ``Referer`` — of this server's own host and port. Otherwise 403;
- a form login (``application/x-www-form-urlencoded``) needs the same proof, cookie or not, so a
  foreign page cannot sign the browser in to an account of the attacker's choosing;
- a body an HTML form can send (form-encoded, multipart, text/plain) is refused with 415 everywhere
  but the form login and file uploads (``/api/files/``, raw bytes): the endpoints take JSON.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from backend.body_guard import send_error

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
DASHBOARD_HEADER = "x-collapipe"
LOGIN_PATH = "/api/auth/login"
RAW_BODY_PREFIX = "/api/files/"
DEFAULT_PORTS = {"http": 80, "https": 443}


class CsrfGuard:
    def __init__(self, app: ASGIApp, session_cookie: str) -> None:
        self.app = app
        self.session_cookie = session_cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or scope["method"] not in UNSAFE_METHODS or not path.startswith("/api/"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        form_login = path == LOGIN_PATH and content_type == "application/x-www-form-urlencoded"
        if "authorization" not in headers:
            with_cookie = self.session_cookie in cookie_parser(headers.get("cookie", ""))
            if (with_cookie or form_login) and not from_this_origin(headers):
                await send_error(
                    send,
                    403,
                    "cross_site_request",
                    "refused: a change made with the session cookie must come from the dashboard's "
                    "own origin (the dashboard sends the header X-CollaPipe: 1); scripts use an API "
                    "token (Authorization: Bearer <token>)",
                )
                return
        if content_type in FORM_TYPES and not form_login and not path.startswith(RAW_BODY_PREFIX):
            await send_error(
                send,
                415,
                "unsupported_media_type",
                f"this endpoint takes JSON: send the body as Content-Type: application/json, "
                f"not {content_type}",
            )
            return
        await self.app(scope, receive, send)


def from_this_origin(headers: Headers) -> bool:
    """Whether a browser request shows it was made by a page of this server's own origin."""
    if DASHBOARD_HEADER in headers or headers.get("sec-fetch-site") == "same-origin":
        return True
    host = headers.get("host")
    origin = headers.get("origin")
    if origin is not None:
        return host is not None and _same_host(origin, host)
    referer = headers.get("referer")
    return referer is not None and host is not None and _same_host(referer, host)


def _same_host(url: str, host: str) -> bool:
    """Whether ``url``'s host and port are the request's ``Host`` (a port left out is the default
    of ``url``'s scheme: behind a TLS proxy the request itself may arrive over plain HTTP)."""
    try:
        source = urlsplit(url)
        served = urlsplit(f"//{host}")
        source_port = source.port or DEFAULT_PORTS.get(source.scheme)
        served_port = served.port or DEFAULT_PORTS.get(source.scheme)
    except ValueError:
        return False
    if source.scheme not in DEFAULT_PORTS or not source.hostname:
        return False
    return source.hostname == served.hostname and source_port == served_port
