"""Rules of users, logins and tokens. Functions flush, never commit (the request boundary commits).

Every change that ends or narrows someone's access (a token revoked, sessions ended, a password or a
role changed, a user deactivated or deleted) has this process forget the callers it remembers
(``backend.users.credentials``) once the change commits (``_access_changed``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.models import ROLES, ApiToken, BrowserSession, User
from backend.db.transaction import after_commit
from backend.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthenticated
from backend.users import repository as repo
from backend.users import security
from backend.users.credentials import forget_all
from backend.users.login_guard import LoginGuard
from backend.users.schemas import PasswordChange, UserCreate, UserUpdate
from backend.users.security import hash_password, hash_secret, new_password, new_secret

ROLE_RANK = {role: rank for rank, role in enumerate(ROLES)}


def has_role(user: User, role: str) -> bool:
    return ROLE_RANK[user.role] >= ROLE_RANK[role]


def authenticate(session: Session, username: str, password: str, guard: LoginGuard, client: str) -> User:
    """The user whose password this is; 401 otherwise (the same answer, and the same work, whether
    or not the username exists); 429 while ``guard`` throttles the username or the client."""
    guard.check(client, username)
    user = repo.get_user_by_name(session, username)
    with guard.checking():
        matches = security.verify_password(user.password_hash if user else None, password)
    if user is None or not matches:
        guard.failed(client, username)
        raise Unauthenticated("wrong username or password")
    guard.succeeded(client, username)
    return user


def start_session(session: Session, user: User, ttl_s: float) -> str:
    """Create a browser session; returns the cookie value (only its hash is stored)."""
    secret = new_secret("cps_")
    now = utcnow()
    repo.delete_expired_sessions(session, now)
    repo.add_session(
        session,
        BrowserSession(
            user_id=user.id, token_hash=hash_secret(secret), expires_at=now + timedelta(seconds=ttl_s)
        ),
    )
    return secret


def _access_changed(session: Session) -> None:
    after_commit(session, forget_all)


def end_session(session: Session, secret: str) -> None:
    repo.delete_session(session, hash_secret(secret))
    _access_changed(session)


def get_user(session: Session, user_id: int) -> User:
    user = repo.get_user(session, user_id)
    if user is None:
        raise NotFound(f"no user with id {user_id}")
    return user


def list_users(session: Session) -> list[User]:
    return repo.list_users(session)


def check_password(password: str, username: str, field: str) -> None:
    """InvalidInput naming ``field`` when the password is too easy to guess."""
    problem = security.password_problem(password, username)
    if problem is not None:
        raise InvalidInput(
            f"{field} {problem}", [{"field": field, "value": None, "message": f"the password {problem}"}]
        )


def create_user(session: Session, body: UserCreate) -> User:
    """A new user with the password an admin chose: they must choose their own at first login."""
    check_password(body.password, body.username, "password")
    if repo.get_user_by_name(session, body.username) is not None:
        raise Conflict(f"username {body.username!r} is taken; choose another")
    user = User(
        username=body.username,
        password_hash=hash_password(body.password),
        role=body.role,
        must_change_password=True,
    )
    return repo.add_user(session, user)


def update_user(session: Session, actor: User, user_id: int, body: UserUpdate) -> User:
    user = get_user(session, user_id)
    if body.role is not None and body.role != user.role:
        if user.id == actor.id:
            raise Conflict("you cannot change your own role; ask another admin")
        if user.role == "admin" and repo.count_admins(session) <= 1:
            raise Conflict("cannot demote the last admin; make another user admin first")
        user.role = body.role
        repo.delete_user_sessions(session, user.id)
    if body.password is not None:
        check_password(body.password, user.username, "password")
        user.password_hash = hash_password(body.password)
        user.must_change_password = True  # set by an admin: the user should choose their own
        repo.delete_user_sessions(session, user.id)
    session.flush()
    _access_changed(session)
    return user


def delete_user(session: Session, actor: User, user_id: int) -> None:
    user = get_user(session, user_id)
    if user.id == actor.id:
        raise Conflict("you cannot delete yourself; ask another admin")
    if user.role == "admin" and repo.count_admins(session) <= 1:
        raise Conflict("cannot delete the last admin")
    repo.delete_user(session, user)
    _access_changed(session)


def deactivate_user(session: Session, actor: User, user_id: int) -> User:
    """The user can no longer log in: password cleared, sessions ended, tokens revoked; their runs
    stay. An admin gives them a new password (PATCH) to reactivate them. Deactivating twice is harmless."""
    user = get_user(session, user_id)
    if user.id == actor.id:
        raise Conflict("you cannot deactivate yourself; ask another admin")
    if user.active and user.role == "admin" and repo.count_active_admins(session) <= 1:
        raise Conflict("cannot deactivate the last active admin; make another user admin first")
    user.password_hash = None
    user.must_change_password = False
    repo.delete_user_sessions(session, user.id)
    repo.revoke_user_tokens(session, user.id, utcnow())
    session.flush()
    _access_changed(session)
    return user


def change_password(
    session: Session,
    caller: User,
    body: PasswordChange,
    kept_session: str | None,
    guard: LoginGuard,
    client: str,
) -> None:
    """Set the caller's own password (the current one proves it is them; wrong guesses count as failed
    logins). Every other session of theirs ends, and with ``revoke_tokens`` every API token."""
    user = repo.get_user(session, caller.id)  # their row, in this transaction
    if user is None:
        raise Unauthenticated("your account no longer exists")
    guard.check(client, user.username)
    with guard.checking():
        matches = security.verify_password(user.password_hash, body.current_password)
    if not matches:
        guard.failed(client, user.username)
        raise InvalidInput(
            "current_password is wrong",
            [{"field": "current_password", "value": None, "message": "does not match"}],
        )
    if body.current_password == body.new_password:
        raise InvalidInput(
            "new_password must differ from the current one",
            [{"field": "new_password", "value": None, "message": "same as current_password"}],
        )
    check_password(body.new_password, user.username, "new_password")
    user.password_hash = hash_password(body.new_password)
    user.must_change_password = False
    repo.delete_user_sessions(session, user.id, keep=hash_secret(kept_session) if kept_session else None)
    if body.revoke_tokens:
        repo.revoke_user_tokens(session, user.id, utcnow())
    session.flush()
    _access_changed(session)


def create_token(session: Session, actor: User, name: str, user_id: int | None) -> tuple[ApiToken, str]:
    owner = actor if user_id is None else get_user(session, user_id)
    if owner.id != actor.id and not has_role(actor, "admin"):
        raise Forbidden("only an admin can create tokens for other users")
    secret = new_secret()
    token = repo.add_token(session, ApiToken(user_id=owner.id, name=name, token_hash=hash_secret(secret)))
    return token, secret


def list_tokens(session: Session) -> list[ApiToken]:
    return repo.list_tokens(session)


def revoke_token(session: Session, token_id: int) -> ApiToken:
    token = repo.get_token(session, token_id)
    if token is None:
        raise NotFound(f"no token with id {token_id}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.flush()
        _access_changed(session)
    return token


def reset_password(session: Session, username: str) -> str:
    """A new random password for ``username`` (they must change it); ends their sessions."""
    user = repo.get_user_by_name(session, username)
    if user is None:
        raise ValueError(f"no user named {username!r}")
    password = new_password()
    user.password_hash = hash_password(password)
    user.must_change_password = True
    repo.delete_user_sessions(session, user.id)
    session.flush()
    _access_changed(session)
    return password


@dataclass(frozen=True)
class Bootstrap:
    admin_username: str | None  # set when an admin was created now
    admin_password: str | None  # its one-time password, to print once
    token_installed: bool


def bootstrap(session: Session, bootstrap_token: str | None) -> Bootstrap:
    """First start: create an admin with a random password; install the bootstrap token (hashed)."""
    username = password = None
    if repo.count_users(session) == 0:
        username, password = "admin", new_password()
        repo.add_user(
            session,
            User(
                username=username,
                password_hash=hash_password(password),
                role="admin",
                must_change_password=True,
            ),
        )
    installed = False
    if bootstrap_token:
        if len(bootstrap_token) < 16:
            raise ValueError("COLLAPIPE_BOOTSTRAP_TOKEN must be at least 16 characters; use a random string")
        digest = hash_secret(bootstrap_token)
        existing = repo.get_token_by_hash(session, digest)
        if existing is None:
            admins = [u for u in repo.list_users(session) if u.role == "admin"]
            if not admins:
                raise ValueError("COLLAPIPE_BOOTSTRAP_TOKEN is set but there is no admin to own it")
            repo.add_token(session, ApiToken(user_id=admins[0].id, name="bootstrap", token_hash=digest))
        installed = existing is None or existing.revoked_at is None  # a revoked one stays revoked
    return Bootstrap(username, password, installed)


def auth_is_set_up(session: Session, bootstrap_token_set: bool) -> bool:
    """Whether a non-loopback bind is safe: an admin chose a password, or a bootstrap token exists."""
    return bootstrap_token_set or repo.has_ready_admin(session)
