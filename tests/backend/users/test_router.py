"""Login with a session cookie, logout, password change, users and tokens administration."""

from __future__ import annotations

from tests.backend.conftest import PASSWORD, Api


def test_login_sets_an_httponly_lax_cookie_that_authenticates(api: Api) -> None:
    response = api.client.post("/api/auth/login", json={"username": "viewer", "password": PASSWORD})
    assert response.status_code == 200 and response.json()["role"] == "viewer"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "collapipe_session=" in cookie
    assert api.client.get("/api/auth/me").json()["username"] == "viewer"
    assert api.client.post("/api/auth/logout").status_code == 204
    assert api.client.get("/api/auth/me").status_code == 401


def test_login_accepts_a_form(api: Api) -> None:
    response = api.client.post("/api/auth/login", data={"username": "admin", "password": PASSWORD})
    assert response.status_code == 200 and response.json()["username"] == "admin"


def test_a_wrong_password_is_401_with_the_error_shape(api: Api) -> None:
    response = api.client.post("/api/auth/login", json={"username": "viewer", "password": "nope"})
    assert response.status_code == 401
    assert response.json() == {
        "error": {"code": "unauthenticated", "message": "wrong username or password", "details": None}
    }


def test_a_malformed_login_is_422(api: Api) -> None:
    response = api.client.post("/api/auth/login", json={"username": "viewer"})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_input"


def test_a_revoked_token_stops_working_at_once(api: Api) -> None:
    created = api.client.post("/api/tokens", json={"name": "ci"}, headers=api.as_("admin"))
    assert created.status_code == 201
    token = created.json()["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert api.client.get("/api/auth/me", headers=bearer).status_code == 200
    listed = api.client.get("/api/tokens", headers=api.as_("admin")).json()
    assert all("token" not in t for t in listed)  # the secret is shown once only
    revoked = api.client.delete(f"/api/tokens/{created.json()['id']}", headers=api.as_("admin"))
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    response = api.client.get("/api/auth/me", headers=bearer)
    assert response.status_code == 401 and "revoked" in response.json()["error"]["message"]


def test_admin_manages_users_and_the_last_admin_is_protected(api: Api) -> None:
    admin = api.as_("admin")
    created = api.client.post(
        "/api/users", json={"username": "ada", "password": "long enough", "role": "operator"}, headers=admin
    )
    assert created.status_code == 201
    user_id = created.json()["id"]
    assert (
        api.client.post(
            "/api/users", json={"username": "ada", "password": "long enough"}, headers=admin
        ).status_code
        == 409
    )
    assert (
        api.client.patch(f"/api/users/{user_id}", json={"role": "viewer"}, headers=admin).json()["role"]
        == "viewer"
    )
    assert api.client.delete(f"/api/users/{user_id}", headers=admin).status_code == 204
    assert api.client.get(f"/api/users/{user_id}", headers=admin).status_code == 404
    last_admin = api.user_ids["admin"]
    assert (
        api.client.patch(f"/api/users/{last_admin}", json={"role": "viewer"}, headers=admin).status_code
        == 409
    )
    assert api.client.delete(f"/api/users/{last_admin}", headers=admin).status_code == 409


def test_password_change_requires_the_current_password(api: Api) -> None:
    viewer = api.as_("viewer")
    wrong = api.client.post(
        "/api/auth/password", json={"current_password": "x", "new_password": "another one"}, headers=viewer
    )
    assert wrong.status_code == 422 and wrong.json()["error"]["details"][0]["field"] == "current_password"
    ok = api.client.post(
        "/api/auth/password",
        json={"current_password": PASSWORD, "new_password": "another one"},
        headers=viewer,
    )
    assert ok.status_code == 204
    login = api.client.post("/api/auth/login", json={"username": "viewer", "password": "another one"})
    assert login.status_code == 200 and login.json()["must_change_password"] is False
