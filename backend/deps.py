"""Annotated dependency aliases used by every router: the session, the caller, the role gates."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, TypeVar

from anyio import to_thread
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from backend.db.models import User
from backend.db.transaction import commit_and_notify, discard_pending
from backend.errors import Forbidden, Unauthenticated
from backend.live.channel import LiveChannel
from backend.metrics.series_cache import SeriesCache
from backend.runs.dispatch import RunDispatcher
from backend.settings import Settings
from backend.users import service as users

SESSION_COOKIE = "collapipe_session"
_ENDED = "ended_by_endpoint"  # session.info key: the transaction was ended in the endpoint's thread

T = TypeVar("T")


async def _session(request: Request) -> AsyncIterator[Session]:
    """One session per request; commits when the endpoint returns, then runs after-commit actions.

    An async generator: creating a session does no I/O (it connects on first use, in the endpoint's
    thread), so only the end — commit, after-commit actions, close — takes a worker thread, unless
    the endpoint already ended it in its own thread (``run_and_commit``).
    """
    state = request.app.state
    # GET only reads (or, at most, stamps a token's last use, a write that needs no transaction)
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


async def run_and_commit(session: Session, work: Callable[[], T]) -> T:
    """``work()``, then the request's commit (or discard, if it raised) and close, in one worker thread.

    For ``async def`` endpoints of hot paths: the endpoint's database work and the end of its
    transaction share one thread hop instead of two (each hop costs a wake-up of a worker thread
    and of the event loop). The session dependency then finds the session ended and does nothing.
    """

    def run() -> T:
        try:
            result = work()
        except BaseException:
            session.info[_ENDED] = True
            _discard_and_close(session)
            raise
        session.info[_ENDED] = True
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
SeriesCacheDep = Annotated[SeriesCache, Depends(_series_cache)]
ChannelDep = Annotated[LiveChannel, Depends(_channel)]
DispatcherDep = Annotated[RunDispatcher, Depends(_dispatcher)]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthenticated("Authorization header must be 'Bearer <token>'")
    return value.strip()


def _current_user(request: Request, session: SessionDep) -> User:
    """The caller, from ``Authorization: Bearer <token>`` or else the session cookie; 401 if neither."""
    token = _bearer(request)
    if token is not None:
        user = users.user_for_token(session, token)
        if user is None:
            raise Unauthenticated("the API token is unknown or revoked")
        return user
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        user = users.user_for_session(session, cookie)
        if user is not None:
            return user
        raise Unauthenticated("the session expired or was ended; log in again")
    raise Unauthenticated("log in (POST /api/auth/login) or send 'Authorization: Bearer <token>'")


CurrentUser = Annotated[User, Depends(_current_user)]


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
