"""SQL of users, API tokens and browser sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, delete, func, select, update
from sqlalchemy.orm import Session

from backend.db.models import ApiToken, BrowserSession, User


def get_user(session: Session, user_id: int) -> User | None:
    return session.get(User, user_id)


def get_user_by_name(session: Session, username: str) -> User | None:
    return session.scalar(select(User).where(User.username == username))


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.id)))


def count_admins(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(User).where(User.role == "admin")) or 0)


def count_active_admins(session: Session) -> int:
    query = (
        select(func.count()).select_from(User).where(User.role == "admin", User.password_hash.is_not(None))
    )
    return int(session.scalar(query) or 0)


def revoke_user_tokens(session: Session, user_id: int, now: datetime) -> None:
    session.execute(
        update(ApiToken)
        .where(ApiToken.user_id == user_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )


def count_users(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(User)) or 0)


def has_ready_admin(session: Session) -> bool:
    """An admin who has set their own password (not the printed initial one)."""
    query = (
        select(func.count())
        .select_from(User)
        .where(User.role == "admin", User.password_hash.is_not(None), User.must_change_password.is_(False))
    )
    return bool(session.scalar(query))


def add_user(session: Session, user: User) -> User:
    session.add(user)
    session.flush()
    return user


def delete_user(session: Session, user: User) -> None:
    session.delete(user)
    session.flush()


def add_token(session: Session, token: ApiToken) -> ApiToken:
    session.add(token)
    session.flush()
    return token


def get_token(session: Session, token_id: int) -> ApiToken | None:
    return session.get(ApiToken, token_id)


def get_token_by_hash(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash))


# built once: a request's token check then skips building and hashing the statement (a hot path)
_TOKEN_WITH_USER = (
    select(User, ApiToken.id, ApiToken.revoked_at)
    .join(ApiToken, ApiToken.user_id == User.id)
    .where(ApiToken.token_hash == bindparam("token_hash"))
)


TokenCheck = Row[User, int, datetime | None]


def token_with_user(session: Session, token_hash: str) -> TokenCheck | None:
    """(user, token id, revoked_at) of the token with this hash, in one query."""
    return session.execute(_TOKEN_WITH_USER, {"token_hash": token_hash}).first()


def list_tokens(session: Session, user_id: int | None = None) -> list[ApiToken]:
    query = select(ApiToken).order_by(ApiToken.id)
    if user_id is not None:
        query = query.where(ApiToken.user_id == user_id)
    return list(session.scalars(query))


def touch_tokens(session: Session, last_used: dict[int, datetime]) -> None:
    """Set ``last_used_at`` of each token id (one batched UPDATE; unknown ids are ignored)."""
    _touch(session, ApiToken.__table__, last_used)


def touch_sessions(session: Session, last_used: dict[int, datetime]) -> None:
    _touch(session, BrowserSession.__table__, last_used)


def _touch(session: Session, table: Any, last_used: dict[int, datetime]) -> None:
    if not last_used:
        return
    statement = (
        update(table).where(table.c.id == bindparam("row_id")).values(last_used_at=bindparam("used_at"))
    )
    rows = [{"row_id": key, "used_at": when} for key, when in sorted(last_used.items())]
    session.connection().execute(statement, rows)


def add_session(session: Session, browser_session: BrowserSession) -> None:
    session.add(browser_session)
    session.flush()


def get_session_by_hash(session: Session, token_hash: str) -> BrowserSession | None:
    return session.scalar(select(BrowserSession).where(BrowserSession.token_hash == token_hash))


def delete_session(session: Session, token_hash: str) -> None:
    session.execute(delete(BrowserSession).where(BrowserSession.token_hash == token_hash))


def delete_user_sessions(session: Session, user_id: int, keep: str | None = None) -> None:
    """End the user's sessions, but the one whose hash is ``keep``."""
    query = delete(BrowserSession).where(BrowserSession.user_id == user_id)
    if keep is not None:
        query = query.where(BrowserSession.token_hash != keep)
    session.execute(query)


def delete_expired_sessions(session: Session, now: datetime) -> None:
    session.execute(delete(BrowserSession).where(BrowserSession.expires_at < now))
