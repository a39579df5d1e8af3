"""Login with a session cookie, logout, password change, users and tokens administration."""

from __future__ import annotations

from tests.backend.conftest import PASSWORD, Api

DASHBOARD = {"X-CollaPipe": "1"}  # what the dashboard sends with the session cookie


def test_login_sets_an_httponly_lax_cookie_that_authenticates(api: Api) -> None:
    response = api.client.post("/api/auth/login", json={"username": "viewer", "password": PASSWORD})
    assert response.status_code == 200 and response.json()["role"] == "viewer"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "collapipe_session=" in cookie
    assert api.client.get("/api/auth/me").json()["username"] == "viewer"
    assert api.client.post("/api/auth/logout", headers=DASHBOARD).status_code == 204
    assert api.client.get("/api/auth/me").status_code == 401


def test_login_accepts_a_form_from_the_same_origin(api: Api) -> None:
    response = api.client.post(
        "/api/auth/login",
        data={"username": "admin", "password": PASSWORD},
        headers={"origin": "http://testserver"},
    )
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


def test_a_deactivated_user_cannot_log_in_and_their_tokens_stop(api: Api) -> None:
    admin = api.as_("admin")
    created = api.client.post(
        "/api/users", json={"username": "gone", "password": "long enough", "role": "operator"}, headers=admin
    ).json()
    assert created["active"] is True
    token = api.client.post(
        "/api/tokens", json={"name": "ci", "user_id": created["id"]}, headers=admin
    ).json()["token"]
    assert api.client.post("/api/auth/login", json={"username": "gone", "password": "long enough"}).is_success
    api.client.cookies.clear()

    deactivated = api.client.post(f"/api/users/{created['id']}/deactivate", headers=admin)
    assert deactivated.status_code == 200 and deactivated.json()["active"] is False
    login = api.client.post("/api/auth/login", json={"username": "gone", "password": "long enough"})
    assert login.status_code == 401
    assert api.client.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    listed = api.client.get("/api/tokens", headers=admin).json()
    assert all(t["revoked_at"] is not None for t in listed if t["user_id"] == created["id"])

    # a new password from an admin reactivates them
    api.client.patch(f"/api/users/{created['id']}", json={"password": "brand new one"}, headers=admin)
    login = api.client.post("/api/auth/login", json={"username": "gone", "password": "brand new one"})
    assert login.status_code == 200 and login.json()["active"] is True


def test_an_admin_cannot_deactivate_themselves_or_the_last_admin(api: Api) -> None:
    admin = api.as_("admin")
    response = api.client.post(f"/api/users/{api.user_ids['admin']}/deactivate", headers=admin)
    assert response.status_code == 409 and "yourself" in response.json()["error"]["message"]
    assert api.client.get("/api/auth/me", headers=admin).status_code == 200
    refused = api.client.post(f"/api/users/{api.user_ids['viewer']}/deactivate", headers=api.as_("operator"))
    assert refused.status_code == 403
