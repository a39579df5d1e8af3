"""ASGI middleware: the security headers of every response (dashboard pages, static files, the API).

- ``Content-Security-Policy``: scripts, styles, images, fonts and connections from this origin only;
  no inline script and no eval (the dashboard is ES modules, plotly.js a file of its own); inline
  *styles* are allowed (plotly.js sets style attributes and injects its stylesheet); images may also
  be ``data:``/``blob:`` URLs (plotly.js's PNG export); no plugins, no ``<base>``, forms post only
  here, and no page may frame the dashboard (clickjacking).
- ``X-Frame-Options: DENY`` for browsers that predate ``frame-ancestors``.
- ``X-Content-Type-Options: nosniff``: a file is never run as a type it was not served as.
- ``Referrer-Policy: same-origin``: run and study addresses are not sent to other sites.

A response that sets one of these itself keeps its own.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
