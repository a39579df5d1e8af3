"""A synchronous HTTP client for the ASGI app: httpx over ASGITransport, the app's lifespan entered.

(Starlette's TestClient warns that it wants httpx2; this does the same job with plain httpx.) The
event loop runs in a portal thread for the client's whole life, so background tasks started by the
lifespan (the local dispatcher) keep running between requests.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI


class SyncClient:
    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self._lifespan = self.portal.wrap_async_context_manager(app.router.lifespan_context(app))
        self._lifespan.__enter__()
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")

    @property
    def cookies(self) -> httpx.Cookies:
        return self._client.cookies

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self._client.request, method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)

    def close(self) -> None:
        try:
            self.portal.call(self._client.aclose)
            self._lifespan.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
