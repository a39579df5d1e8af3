"""SSE endpoints: GET /api/runs/{id}/events (one run) and GET /api/runs/events (all runs' status).

``id:`` lines carry the channel's event ids; a reconnecting client's ``Last-Event-ID`` header (or
the ``after`` query parameter, for clients that cannot set headers) resumes after it. A browser
``EventSource`` authenticates with the session cookie. A run's stream ends after its terminal
status; connecting to a finished run with nothing left to send answers 204, which tells
``EventSource`` to stop reconnecting.

A stream holds no database connection while it waits: the caller and the run's status are read
with short sessions of their own, and the caller is checked again every half heartbeat, so a
revoked token, an ended session or a deleted user ends the stream (``event: revoked``) within one
heartbeat.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from backend.db.engine import SessionFactory
from backend.db.models import TERMINAL_STATUSES
from backend.deps import ChannelDep, SettingsDep, StreamAccess, StreamViewer
from backend.errors import ERROR_RESPONSES, InvalidInput, NotFound
from backend.live.channel import LiveChannel, Selector
from backend.live.sse import run_events, status_events
from backend.params import IdPath
from backend.runs.repository import status_of

router = APIRouter(prefix="/api/runs", tags=["live"], responses=ERROR_RESPONSES)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": "event stream"},
    204: {"description": "the run is finished and nothing is left to send"},
}
LastEventIdHeader = Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)]
AfterQuery = Annotated[str | None, Query(max_length=64, description="same as the Last-Event-ID header")]


def resume_point(channel: LiveChannel, header: str | None, query: str | None) -> str | None:
    """The id to resume after (the header wins); 422 naming the parameter for an id of no stream."""
    field, after = ("Last-Event-ID", header) if header is not None else ("after", query)
    if after is None:
        return None
    try:
        channel.validate_id(after)
    except ValueError as err:
        raise InvalidInput(
            str(err), [{"field": field, "value": after, "message": "not an event id of this stream"}]
        ) from None
    return after


@router.get("/events", response_class=StreamingResponse, responses=SSE_RESPONSE)
async def all_runs_events(
    channel: ChannelDep,
    settings: SettingsDep,
    access: StreamViewer,
    last_event_id: LastEventIdHeader = None,
    after: AfterQuery = None,
) -> StreamingResponse:
    """Status changes of every run (``event: status``), from now or after Last-Event-ID."""
    start = resume_point(channel, last_event_id, after)
    if start is None:
        start = await channel.head(None)
    return StreamingResponse(
        status_events(channel, start, settings.sse_heartbeat_s, access.allowed),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


@router.get("/{run_id}/events", response_class=StreamingResponse, responses=SSE_RESPONSE)
async def one_run_events(
    run_id: IdPath,
    request: Request,
    channel: ChannelDep,
    settings: SettingsDep,
    access: StreamViewer,
    last_event_id: LastEventIdHeader = None,
    after: AfterQuery = None,
) -> Response:
    """The run's ``round`` and ``status`` events from the start (or after Last-Event-ID)."""
    factory: SessionFactory = request.app.state.session_factory
    threads = request.app.state.stream_threads  # streams' own: never a thread a request needs

    async def is_finished() -> bool:
        status = await to_thread.run_sync(_status, factory, run_id, limiter=threads)
        return status is None or status in TERMINAL_STATUSES

    if await to_thread.run_sync(_status, factory, run_id, limiter=threads) is None:
        raise NotFound(f"no run with id {run_id}")
    start = resume_point(channel, last_event_id, after)
    return await event_stream(channel, run_id, start, settings.sse_heartbeat_s, is_finished, access)


async def event_stream(
    channel: LiveChannel,
    run_id: Selector,
    start: str | None,
    heartbeat_s: float,
    is_finished: Callable[[], Awaitable[bool]],
    access: StreamAccess,
    **relay: Any,
) -> Response:
    """The stream of ``run_events`` (``relay``: its ``shape`` and ``after_batch``), or 204 when the
    runs are finished and nothing after ``start`` is left to send."""
    if await is_finished() and await channel.head(run_id) == (start or "0"):
        return Response(status_code=204)
    return StreamingResponse(
        run_events(channel, run_id, start, heartbeat_s, is_finished, access.allowed, **relay),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def _status(factory: SessionFactory, run_id: int) -> str | None:
    with factory() as session:
        return status_of(session, run_id)
