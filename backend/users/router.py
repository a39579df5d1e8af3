"""/api/auth (login, logout, me, password), /api/users and /api/tokens (admin)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response, status
from pydantic import ValidationError

from backend.deps import SESSION_COOKIE, AdminUser, CurrentUser, SessionDep, SettingsDep
from backend.errors import ERROR_RESPONSES, ErrorResponse, InvalidInput
from backend.params import IdPath
from backend.users import service
from backend.users.schemas import (
    LoginIn,
    PasswordChange,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UserCreate,
    UserOut,
    UserUpdate,
)

auth_router = APIRouter(prefix="/api/auth", tags=["auth"], responses=ERROR_RESPONSES)
admin_router = APIRouter(prefix="/api", tags=["admin"], responses=ERROR_RESPONSES)
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "conflicts with existing data"}
}

THROTTLED: dict[int | str, dict[str, Any]] = {
    429: {"model": ErrorResponse, "description": "too many failed logins, or password checks at once"}
}

_LOGIN_SCHEMA = {"$ref": "#/components/schemas/LoginIn"}
LOGIN_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": _LOGIN_SCHEMA},
            "application/x-www-form-urlencoded": {"schema": _LOGIN_SCHEMA},
        },
    }
}


def client_address(request: Request) -> str:
    """The caller's address (behind a proxy, the one uvicorn's --forwarded-allow-ips trusts)."""
    return request.client.host if request.client else "unknown"


async def _login_body(request: Request) -> LoginIn:
    """JSON or an HTML form: the same two fields."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if content_type == "application/x-www-form-urlencoded":
            form = await request.form()
            data: Any = {k: v for k, v in form.items() if isinstance(v, str)}
        else:
            data = json.loads(await request.body() or b"null")
        return LoginIn.model_validate(data)
    except (ValidationError, ValueError) as err:
        raise InvalidInput(
            "log in with {'username': ..., 'password': ...} as JSON or a form",
            [{"field": "body", "value": None, "message": str(err).splitlines()[0]}],
        ) from None


@auth_router.post("/login", openapi_extra=LOGIN_BODY, responses=THROTTLED)
def login(
    body: Annotated[LoginIn, Depends(_login_body)],
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
) -> UserOut:
    """Check the password and set the session cookie (HttpOnly, SameSite=Lax). 429 with Retry-After
    after repeated failures for the username or from the client's address, or while the server is
    checking too many passwords at once."""
    guard = request.app.state.login_guard
    user = service.authenticate(session, body.username, body.password, guard, client_address(request))
    secret = service.start_session(session, user, settings.session_ttl_s)
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=int(settings.session_ttl_s),
        httponly=True,
        samesite="lax",
        secure=settings.session_cookie_secure(),
        path="/",
    )
    return UserOut.model_validate(user)


@auth_router.post("/logout", status_code=status.HTTP_204_NO_CONTENT)
def logout(request: Request, session: SessionDep, _user: CurrentUser) -> Response:
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        service.end_session(session, cookie)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@auth_router.get("/me")
def me(user: CurrentUser) -> UserOut:
    return UserOut.model_validate(user)


@auth_router.post("/password", status_code=status.HTTP_204_NO_CONTENT, responses=THROTTLED)
def change_password(
    body: PasswordChange, request: Request, session: SessionDep, user: CurrentUser
) -> Response:
    """Choose your own password (the current one proves it is you). Your other browser sessions end
    (this one stays); ``revoke_tokens`` also revokes every API token of yours. Clears
    ``must_change_password``: until then a session may use only this, /me and logout."""
    service.change_password(
        session,
        user,
        body,
        request.cookies.get(SESSION_COOKIE),
        request.app.state.login_guard,
        client_address(request),
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@admin_router.get("/users")
def list_users(session: SessionDep, _admin: AdminUser) -> list[UserOut]:
    return [UserOut.model_validate(u) for u in service.list_users(session)]


@admin_router.post("/users", status_code=status.HTTP_201_CREATED, responses=CONFLICT)
def create_user(body: UserCreate, session: SessionDep, _admin: AdminUser) -> UserOut:
    return UserOut.model_validate(service.create_user(session, body))


@admin_router.get("/users/{user_id}")
def get_user(user_id: IdPath, session: SessionDep, _admin: AdminUser) -> UserOut:
    return UserOut.model_validate(service.get_user(session, user_id))


@admin_router.patch("/users/{user_id}", responses=CONFLICT)
def update_user(user_id: IdPath, body: UserUpdate, session: SessionDep, admin: AdminUser) -> UserOut:
    return UserOut.model_validate(service.update_user(session, admin, user_id, body))


@admin_router.post("/users/{user_id}/deactivate", responses=CONFLICT)
def deactivate_user(user_id: IdPath, session: SessionDep, admin: AdminUser) -> UserOut:
    """End the user's access (no login, sessions ended, tokens revoked) and keep their runs; give
    them a new password (PATCH) to reactivate them."""
    return UserOut.model_validate(service.deactivate_user(session, admin, user_id))


@admin_router.delete("/users/{user_id}", status_code=status.HTTP_204_NO_CONTENT, responses=CONFLICT)
def delete_user(user_id: IdPath, session: SessionDep, admin: AdminUser) -> Response:
    service.delete_user(session, admin, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@admin_router.get("/tokens")
def list_tokens(session: SessionDep, _admin: AdminUser) -> list[TokenOut]:
    return [TokenOut.model_validate(t) for t in service.list_tokens(session)]


@admin_router.post("/tokens", status_code=status.HTTP_201_CREATED)
def create_token(body: TokenCreate, session: SessionDep, admin: AdminUser) -> TokenCreated:
    """A new API token; the secret is in this response only (it is stored hashed)."""
    token, secret = service.create_token(session, admin, body.name, body.user_id)
    return TokenCreated(**TokenOut.model_validate(token).model_dump(), token=secret)


@admin_router.delete("/tokens/{token_id}")
def revoke_token(token_id: IdPath, session: SessionDep, _admin: AdminUser) -> TokenOut:
    """Revoke a token: it stops working at once. Revoking twice is harmless."""
    return TokenOut.model_validate(service.revoke_token(session, token_id))
