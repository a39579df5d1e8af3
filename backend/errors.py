"""Domain exceptions (no web framework here: workers may import services that raise them).

backend/error_handlers.py renders them; every error the API returns has the shape
``{"error": {"code", "message", "details"}}``. A bad experiment config answers 422 with ``details``
= ``[{"field", "value", "message"}, ...]`` (the core's ConfigError problems); request validation
errors use the same detail shape.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from collapipe_core.validation import ConfigError


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class DomainError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class NotFound(DomainError):
    status_code, code = 404, "not_found"


class Conflict(DomainError):
    status_code, code = 409, "conflict"


class InvalidInput(DomainError):
    status_code, code = 422, "invalid_input"


class InvalidConfig(DomainError):
    status_code, code = 422, "invalid_config"

    @staticmethod
    def from_config_error(err: ConfigError, prefix: str = "config") -> InvalidConfig:
        details = []
        for problem in err.problems:
            item = problem.to_json()
            item["field"] = f"{prefix}.{item['field']}" if prefix else item["field"]
            details.append(item)
        return InvalidConfig(f"the experiment config has {len(details)} problem(s)", details)


class Unauthenticated(DomainError):
    status_code, code = 401, "unauthenticated"


class Forbidden(DomainError):
    status_code, code = 403, "forbidden"


class Unavailable(DomainError):
    status_code, code = 503, "unavailable"


class TooManyRequests(DomainError):
    """429 with ``Retry-After``: the caller should wait ``retry_after_s`` seconds before trying again."""

    status_code, code = 429, "too_many_requests"

    def __init__(self, message: str, retry_after_s: int, details: Any = None) -> None:
        super().__init__(message, details)
        self.retry_after_s = max(1, retry_after_s)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "not authenticated"},
    403: {"model": ErrorResponse, "description": "role too low"},
    404: {"model": ErrorResponse, "description": "no such resource"},
    413: {"model": ErrorResponse, "description": "request body over COLLAPIPE_MAX_BODY_BYTES"},
    422: {"model": ErrorResponse, "description": "invalid request or config (details name each field)"},
}
