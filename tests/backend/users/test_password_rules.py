"""Password hygiene: a changed password ends the user's other sessions (and, if asked, their API
tokens); a password an admin set must be replaced before the session may do anything else; trivial
passwords are refused; the session cookie is Secure unless the server only listens on loopback."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI

from backend.deps import SESSION_COOKIE
from backend.settings import Settings
from tests.backend.client import SyncClient
from tests.backend.conftest import PASSWORD, Api, RecordingDispatcher

DASHBOARD = {"X-CollaPipe": "1"}


class Browser:
    """Another browser signed in to the same app: its own session cookie, sent with each request."""

    def __init__(self, api: Api, username: str, password: str = PASSWORD) -> None:
        self.client = api.client
        response = self.client.post("/api/auth/login", json={"username": username, "password": password})
        assert response.status_code == 200, response.text
        self.cookie = {"cookie": f"{SESSION_COOKIE}={response.cookies[SESSION_COOKIE]}"}
        self.client.cookies.clear()

    def get(self, url: str) -> Any:
        return self.client.get(url, headers=self.cookie)

    def post(self, url: str, **kwargs: Any) -> Any:
        return self.client.post(url, **kwargs, headers={**self.cookie, **DASHBOARD})


def _change(browser: Browser, current: str, new: str, **extra: Any) -> Any:
    body = {"current_password": current, "new_password": new, **extra}
    return browser.post("/api/auth/password", json=body)


@pytest.mark.parametrize("revoke_tokens", [False, True])
def test_a_password_change_ends_the_other_sessions_and_optionally_the_tokens(
    api: Api, revoke_tokens: bool
) -> None:
    first, second = Browser(api, "operator"), Browser(api, "operator")
    assert _change(first, PASSWORD, "a brand new secret", revoke_tokens=revoke_tokens).status_code == 204
    assert first.get("/api/auth/me").status_code == 200  # the session that changed it stays
    assert second.get("/api/auth/me").status_code == 401
    token = api.client.get("/api/auth/me", headers=api.as_("operator"))
    assert token.status_code == (401 if revoke_tokens else 200)


def test_a_user_an_admin_created_must_choose_a_password_before_anything_else(api: Api) -> None:
    created = api.client.post(
        "/api/users",
        json={"username": "newbie", "password": "set by the admin", "role": "operator"},
        headers=api.as_("admin"),
    )
    assert created.status_code == 201 and created.json()["must_change_password"] is True
    browser = Browser(api, "newbie", "set by the admin")
    refused = browser.get("/api/runs")
    assert refused.status_code == 403 and "/api/auth/password" in refused.json()["error"]["message"]
    assert browser.post("/api/runs", json={}).status_code == 403
    assert browser.get("/api/auth/me").json()["must_change_password"] is True
    assert _change(browser, "set by the admin", "now my own choice").status_code == 204
    assert browser.get("/api/auth/me").json()["must_change_password"] is False
    assert browser.get("/api/runs").status_code == 200
    assert browser.post("/api/auth/logout").status_code == 204


def test_a_password_reset_by_an_admin_sets_the_flag_again(api: Api) -> None:
    admin = api.as_("admin")
    viewer_id = api.user_ids["viewer"]
    assert api.client.patch(
        f"/api/users/{viewer_id}", json={"password": "reset by admin"}, headers=admin
    ).is_success
    browser = Browser(api, "viewer", "reset by admin")
    assert browser.get("/api/runs").status_code == 403
    # an API token is not a password: automation keeps working (the admin chose to hand it out)
    assert api.client.get("/api/runs", headers=api.as_("viewer")).status_code == 200


TRIVIAL = [
    ("op1", "password", "common"),
    ("op1", "12345678", "common"),
    ("op1", "qwertyuiop", "common"),
    ("op1", "aaaaaaaa", "different characters"),
    ("op1", "abababab", "different characters"),
    ("op1", "op1op1op1", "user name"),
    ("carol", "Carol2024!", "user name"),
]


@pytest.mark.deployments("embedded")  # the rule is the service's: one database is enough
def test_trivial_passwords_are_refused_everywhere_one_is_set(api: Api) -> None:
    admin = api.as_("admin")
    viewer = f"/api/users/{api.user_ids['viewer']}"
    for username, password, why in TRIVIAL:
        body = {"username": username, "password": password, "role": "viewer"}
        created = api.client.post("/api/users", json=body, headers=admin)
        assert created.status_code == 422, created.text
        detail = created.json()["error"]["details"][0]
        assert detail["field"] == "password" and why in detail["message"], detail
        if why == "user name":  # the same password for the viewer: with their own name in it
            password = re.sub(re.escape(username), "viewer", password, flags=re.IGNORECASE)
        assert api.client.patch(viewer, json={"password": password}, headers=admin).status_code == 422
        changed = api.client.post(
            "/api/auth/password",
            json={"current_password": PASSWORD, "new_password": password},
            headers=api.as_("viewer"),
        )
        assert changed.status_code == 422, password
        assert changed.json()["error"]["details"][0]["field"] == "new_password"
    assert [u["username"] for u in api.client.get("/api/users", headers=admin).json()] == [
        "viewer",
        "operator",
        "admin",
    ]  # nothing was created


@pytest.mark.deployments("embedded")
def test_the_session_cookie_is_secure_unless_served_on_loopback(
    app_factory: Callable[..., FastAPI], api: Api
) -> None:
    for host, cookie_secure, secure in [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("0.0.0.0", None, True),
        ("0.0.0.0", False, False),
        ("::1", True, True),
    ]:
        settings = Settings(host=host, cookie_secure=cookie_secure, _env_file=None)
        assert settings.session_cookie_secure() is secure, (host, cookie_secure)
    login = {"username": "viewer", "password": PASSWORD}
    on_loopback = api.client.post("/api/auth/login", json=login)  # the test app listens on 127.0.0.1
    assert "secure" not in on_loopback.headers["set-cookie"].lower().split("; ")
    with SyncClient(app_factory(RecordingDispatcher(), host="0.0.0.0")) as client:
        public = client.post("/api/auth/login", json=login)
    assert "secure" in public.headers["set-cookie"].lower().split("; ")
