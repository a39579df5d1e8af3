"""Annotated dependency aliases used by every router: the session, the caller, the role gates."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from backend.db.engine import SessionFactory
from backend.db.models import User
from backend.db.transaction import commit_and_notify, discard_pending
from backend.errors import Forbidden, Unauthenticated
from backend.live.channel import LiveChannel
from backend.metrics.series_cache import SeriesCache
from backend.preflight import PreflightProcess
from backend.runtime.dispatch import RunDispatcher
from backend.runtime.wake import Wake
from backend.settings import Settings
from backend.users import service as users
from backend.users.credentials import Credential, Credentials
from collapipe_core.workspace import Workspace

SESSION_COOKIE = "collapipe_session"


_ENDED = "ended_in_thread"  # session.info: the endpoint ended the transaction itself (in_one_thread)
T = TypeVar("T")


async def _session(request: Request) -> AsyncIterator[Session]:
    """One session per request; commits when the endpoint returns, then runs after-commit actions.

    An async generator: creating a session does no I/O (it connects on first use, in the endpoint's
    thread), so only the end — commit, after-commit actions, close — takes a worker thread, unless
    the endpoint ended it in its own thread (``in_one_thread``).
    """
    state = request.app.state
    # GET only reads (last-use stamps are written apart, backend.users.last_use)
    factory = state.read_session_factory if request.method == "GET" else state.session_factory
    session: Session = factory()
    try:
        yield session
    except BaseException:
        if not session.info.get(_ENDED):
            await to_thread.run_sync(_discard_and_close, session)
        raise
    if not session.info.get(_ENDED):
        await to_thread.run_sync(_commit_and_close, session)


async def in_one_thread(session: Session, work: Callable[[], T]) -> T:
    """``work()`` and then the end of the request's transaction (commit and after-commit actions, or
    discard if it raised; then close), in one worker thread: for the ``async def`` endpoint of a hot
    path. Its pooled connection is held inside that thread only, never while the request waits for
    another thread, and the request takes one thread hop instead of three (a sync endpoint's own, the
    check of its response, the end of its session)."""

    def run() -> T:
        session.info[_ENDED] = True
        try:
            result = work()
        except BaseException:
            _discard_and_close(session)
            raise
        _commit_and_close(session)
        return result

    return await to_thread.run_sync(run)


def _commit_and_close(session: Session) -> None:
    try:
        commit_and_notify(session)
    except BaseException:
        discard_pending(session)
        raise
    finally:
        session.close()


def _discard_and_close(session: Session) -> None:
    try:
        discard_pending(session)
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(_session, scope="function")]


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _workspace(request: Request) -> Workspace:
    workspace: Workspace = request.app.state.workspace
    return workspace


async def _preflight(request: Request) -> PreflightProcess:
    process: PreflightProcess = request.app.state.preflight
    return process


async def _channel(request: Request) -> LiveChannel:
    channel: LiveChannel = request.app.state.channel
    return channel


async def _dispatcher(request: Request) -> RunDispatcher:
    dispatcher: RunDispatcher = request.app.state.dispatcher
    return dispatcher


async def _series_cache(request: Request) -> SeriesCache:
    cache: SeriesCache = request.app.state.series_cache
    return cache


SettingsDep = Annotated[Settings, Depends(_settings)]
WorkspaceDep = Annotated[Workspace, Depends(_workspace)]
PreflightDep = Annotated[PreflightProcess, Depends(_preflight)]
SeriesCacheDep = Annotated[SeriesCache, Depends(_series_cache)]


async def _wake(request: Request) -> Wake:
    wake: Wake = request.app.state.wake
    return wake


ChannelDep = Annotated[LiveChannel, Depends(_channel)]
WakeDep = Annotated[Wake, Depends(_wake)]
DispatcherDep = Annotated[RunDispatcher, Depends(_dispatcher)]


def _credential(request: Request) -> Credential:
    """The request's credential (the bearer token wins over the cookie); 401 if it has none."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("Authorization header must be 'Bearer <token>'")
        return Credential("token", value.strip())
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        return Credential("cookie", cookie)
    raise Unauthenticated("log in (POST /api/auth/login) or send 'Authorization: Bearer <token>'")


# what a session whose password an admin set may do until its user chose their own
BEFORE_PASSWORD_CHANGE = frozenset({"/api/auth/password", "/api/auth/me", "/api/auth/logout"})


async def _user_for(
    credentials: Credentials,
    credential: Credential,
    path: str,
    read_now: tuple[SessionFactory, CapacityLimiter | None] | None = None,
) -> User:
    """The credential's user (``backend.users.credentials``: remembered for a moment, else read from
    the database; with ``read_now``, read now with that session factory in a thread of that limiter):
    a revoked token, an ended or idle session or a deleted user is a 401; a session whose user must
    change their password may reach only BEFORE_PASSWORD_CHANGE (403 elsewhere; an API token is not a
    password and is unaffected)."""
    if read_now is None:
        user = await credentials.caller(credential)
    else:
        user = await credentials.caller_now(credential, *read_now)
    if user is None:
        if credential.kind == "token":
            raise Unauthenticated("the API token is unknown or revoked")
        raise Unauthenticated("the session expired or was ended; log in again")
    if credential.kind == "cookie" and user.must_change_password and path not in BEFORE_PASSWORD_CHANGE:
        raise Forbidden(
            "your password was set by an administrator: choose your own first "
            "(POST /api/auth/password, or 'Change password' in the dashboard)"
        )
    return user


async def _current_user(request: Request) -> User:
    """The caller, from ``Authorization: Bearer <token>`` or else the session cookie; 401 if neither.
    Holds no database session of the request's: a caller not remembered is checked with a short
    session of its own, in a worker thread, before the endpoint runs."""
    return await _user_for(request.app.state.credentials, _credential(request), request.url.path)


CurrentUser = Annotated[User, Depends(_current_user)]


class StreamAccess:
    """The caller of a long-lived stream, checked again while the stream is open.

    A stream holds no database connection while it waits: the caller is read from the database (never
    from the callers remembered for requests) with a short session of its own when the stream opens
    and again by :meth:`allowed` (the stream calls it every half heartbeat), so a revoked token, an
    ended session, a deleted user or a role below ``role`` ends the stream within one heartbeat,
    whichever API process made the change. The check takes a thread of the streams' own limiter
    (``app.state.stream_threads``), never one the requests need.
    """

    def __init__(self, request: Request, role: str) -> None:
        state = request.app.state
        self.credentials: Credentials = state.credentials
        self.session_factory: SessionFactory = state.session_factory
        self.limiter: CapacityLimiter | None = getattr(state, "stream_threads", None)
        self.credential = _credential(request)
        self.role = role
        self.path = request.url.path

    async def check(self) -> User:
        """The caller; Unauthenticated or Forbidden unless they may still act."""
        read_now = (self.session_factory, self.limiter)
        user = await _user_for(self.credentials, self.credential, self.path, read_now)
        if not users.has_role(user, self.role):
            raise Forbidden(f"this needs the {self.role} role; you are {user.role}")
        return user

    async def allowed(self) -> bool:
        try:
            await self.check()
        except (Unauthenticated, Forbidden):
            return False
        return True


async def _stream_viewer(request: Request) -> StreamAccess:
    access = StreamAccess(request, "viewer")
    await access.check()
    return access


StreamViewer = Annotated[StreamAccess, Depends(_stream_viewer)]


async def _uploader(request: Request) -> User:
    """An operator, checked before the endpoint runs, holding no database session: an upload streams
    for minutes and must hold no transaction meanwhile."""
    return await StreamAccess(request, "operator").check()


UploaderUser = Annotated[User, Depends(_uploader)]


def require_role(role: str) -> Callable[[User], Awaitable[User]]:
    async def check(user: CurrentUser) -> User:  # no I/O: async keeps it off the thread pool
        if not users.has_role(user, role):
            raise Forbidden(f"this needs the {role} role; you are {user.role}")
        return user

    check.__name__ = f"require_{role}"
    return check


ViewerUser = Annotated[User, Depends(require_role("viewer"))]
OperatorUser = Annotated[User, Depends(require_role("operator"))]
AdminUser = Annotated[User, Depends(require_role("admin"))]
