"""Request and response bodies of the users domain."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from backend.params import MAX_ID
from backend.request_body import Integral, StrictBody
from backend.text_input import StoredStr

Role = Literal["viewer", "operator", "admin"]
USERNAME_PATTERN = r"^[A-Za-z0-9_.@-]{1,64}$"


class LoginIn(StrictBody):
    username: StoredStr = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    username: str
    role: Role
    must_change_password: bool
    active: bool = Field(description="false once deactivated: no login, sessions ended, tokens revoked")
    created_at: datetime


class UserCreate(StrictBody):
    username: str = Field(pattern=USERNAME_PATTERN, description="letters, digits and _ . @ -")
    password: str = Field(
        min_length=8,
        max_length=1024,
        description="the initial password (the user must choose their own at first login): not a "
        "common password, not the user name, at least 4 different characters",
    )
    role: Role = "viewer"


class UserUpdate(StrictBody):
    role: Role | None = None
    password: str | None = Field(default=None, min_length=8, max_length=1024)


class PasswordChange(StrictBody):
    current_password: str = Field(min_length=1, max_length=1024)
    new_password: str = Field(
        min_length=8,
        max_length=1024,
        description="not a common password, not the user name, at least 4 different characters",
    )
    revoke_tokens: bool = Field(default=False, description="also revoke every API token of yours")


class TokenCreate(StrictBody):
    name: StoredStr = Field(min_length=1, max_length=100)
    user_id: Integral | None = Field(
        default=None, ge=1, le=MAX_ID, description="owner of the token (default: yourself)"
    )


class TokenOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    user_id: int
    name: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="the secret; shown only in this response, stored hashed")
