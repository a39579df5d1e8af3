"""The one place errors become HTTP responses: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.errors import DomainError, TooManyRequests
from collapipe_core.quote import json_value

log = logging.getLogger(__name__)

DATABASE_RETRY_AFTER_S = 5


def error_json(
    status_code: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    headers = dict(headers or {})
    if status_code == 401:
        headers["WWW-Authenticate"] = "Bearer"
    body = {"error": {"code": code, "message": message, "details": details}}
    return JSONResponse(body, status_code=status_code, headers=headers)


def _validation_details(err: RequestValidationError) -> list[dict[str, Any]]:
    details = []
    for e in err.errors():
        loc = [str(p)[:60] for p in e.get("loc", ())]
        details.append(
            {"field": ".".join(loc), "value": json_value(e.get("input")), "message": str(e.get("msg", ""))}
        )
    return details


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_request: Request, err: DomainError) -> JSONResponse:
        headers = {"Retry-After": str(err.retry_after_s)} if isinstance(err, TooManyRequests) else None
        return error_json(err.status_code, err.code, err.message, err.details, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, err: RequestValidationError) -> JSONResponse:
        details = _validation_details(err)
        fields = ", ".join(d["field"] for d in details)
        return error_json(422, "invalid_request", f"invalid request: {fields}", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, err: StarletteHTTPException) -> JSONResponse:
        return error_json(err.status_code, f"http_{err.status_code}", str(err.detail))

    @app.exception_handler(IntegrityError)
    async def _integrity(_request: Request, err: IntegrityError) -> JSONResponse:
        # a race the service's checks could not see (two requests creating the same name at once)
        log.warning("integrity error: %s", err.orig)
        return error_json(409, "conflict", "the change conflicts with data written meanwhile; retry")

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database_unavailable(_request: Request, err: DBAPIError) -> JSONResponse:
        # the database restarts or is unreachable (or a lock wait timed out): try again shortly;
        # a browser's live stream reconnects with backoff on this answer
        log.warning("database unavailable: %s", (str(err.orig or err).strip().splitlines() or [""])[0])
        message = "the database is unavailable; try again in a few seconds"
        response = error_json(503, "database_unavailable", message)
        response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, err: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_json(500, "internal", f"internal error ({type(err).__name__}); see the server log")
