"""ASGI middleware: every request body is bounded and, when JSON, plain data before the app sees it.

- A body over ``max_body_bytes`` gets 413 before it is parsed: a ``Content-Length`` over the limit
  is refused unread, a chunked body once the limit is passed.
- A JSON body may not hold NaN or ±Infinity (Python's parser accepts them, JSON has neither, and
  they would reach the database) and may not nest deeper than ``MAX_DEPTH`` (a config is four
  levels deep). Either gets a 422 naming every such field as ``body.<path>``.

Bodies under ``exempt_prefixes`` (file uploads, which stream to disk under their own limit) pass
through untouched.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_DEPTH = 32
MAX_REPORTED = 20


class BodyGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int, exempt_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.exempt_prefixes = exempt_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if str(scope.get("path", "")).startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if body and (content_type == b"application/json" or content_type.endswith(b"+json")):
            problems = json_problems(body)
            if problems:
                await send_error(send, 422, "invalid_request", _summary(problems), problems)
                return
        await self.app(scope, _replay(body, receive), send)

    async def _too_large(self, send: Send) -> None:
        limit = self.max_body_bytes
        message = (
            f"the request body is larger than {limit:,} bytes (the server's COLLAPIPE_MAX_BODY_BYTES); "
            "send a smaller one"
        )
        await send_error(send, 413, "payload_too_large", message)


def json_problems(body: bytes) -> list[dict[str, Any]]:
    """Non-finite numbers and too-deep nesting in a JSON body, as error details (empty: none, or the
    body is not JSON at all, which the app's own parser reports)."""
    try:
        document = json.loads(body)
    except RecursionError:
        return [_detail("body", None, f"nested deeper than {MAX_DEPTH} levels")]
    except ValueError:
        return []
    found: list[dict[str, Any]] = []
    _walk(document, "body", 0, found)
    return found


def _walk(value: Any, path: str, depth: int, found: list[dict[str, Any]]) -> None:
    if len(found) >= MAX_REPORTED:
        return
    if depth > MAX_DEPTH:
        found.append(_detail(path, None, f"nested deeper than {MAX_DEPTH} levels"))
        return
    if isinstance(value, float) and not math.isfinite(value):
        found.append(_detail(path, repr(value), "must be a finite number; JSON has no NaN or Infinity"))
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{str(key)[:60]}", depth + 1, found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, f"{path}.{i}", depth + 1, found)


def _detail(field: str, value: Any, message: str) -> dict[str, Any]:
    return {"field": field, "value": value, "message": message}


def _summary(problems: list[dict[str, Any]]) -> str:
    return "invalid request: " + ", ".join(p["field"] for p in problems)


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Answer with the API's error shape, ``{"error": {"code", "message", "details"}}``, from a middleware
    (``headers``: more response headers)."""
    document = {"error": {"code": code, "message": message, "details": details}}
    body = json.dumps(document, allow_nan=False).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    if status == 413:
        raw.append((b"connection", b"close"))  # the rest of the body is not read
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the client's disconnect, as the server would

    return replay
