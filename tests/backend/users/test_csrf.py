"""Cross-site request forgery: a change made with the session cookie must come from the dashboard's
own origin (or carry the header the dashboard sends); a page on another port of the same host is
refused with 403 and changes nothing. API tokens are unaffected; form bodies never reach JSON
endpoints; a form login needs the same origin."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backend.builders import insert_run
from tests.backend.conftest import PASSWORD, Api

pytestmark = pytest.mark.deployments("embedded")  # a middleware's rule: the database plays no part

SERVER = "http://testserver"  # the test client's origin (Host: testserver)
OTHER_PORT = "http://testserver:8899"
FORM = {"content-type": "application/x-www-form-urlencoded"}


def _log_in(api: Api, role: str) -> None:
    response = api.client.post("/api/auth/login", json={"username": role, "password": PASSWORD})
    assert response.status_code == 200, response.text


def _status(api: Api, run_id: int) -> str:
    status: str = api.client.get(f"/api/runs/{run_id}", headers=api.as_("viewer")).json()["status"]
    return status


FOREIGN = [
    {"origin": OTHER_PORT, **FORM},  # an auto-submitted form on another port of the same host
    {"origin": "null", **FORM},  # a sandboxed frame or a file
    {"referer": f"{OTHER_PORT}/attack.html", **FORM},  # no Origin, a foreign Referer
    {},  # neither: not the dashboard
    {"origin": "http://evil.example", "sec-fetch-site": "cross-site"},
]
SAME_ORIGIN = [
    {"origin": SERVER},
    {"referer": f"{SERVER}/#/runs"},
    {"x-collapipe": "1"},  # what the dashboard sends
    {"sec-fetch-site": "same-origin"},
]


def test_a_cookie_authenticated_change_from_another_origin_is_refused(api: Api) -> None:
    run_id = insert_run(api.session_factory)
    _log_in(api, "admin")
    for headers in FOREIGN:
        refused = api.client.post(f"/api/runs/{run_id}/cancel", headers=headers)
        assert refused.status_code == 403, (headers, refused.text)
        assert "X-CollaPipe" in refused.json()["error"]["message"]
        deactivated = api.client.post(f"/api/users/{api.user_ids['viewer']}/deactivate", headers=headers)
        assert deactivated.status_code == 403, headers
    assert _status(api, run_id) == "queued"
    assert api.client.get("/api/auth/me", headers=api.as_("viewer")).json()["active"] is True


def test_a_cookie_authenticated_change_from_the_dashboard_is_allowed(api: Api) -> None:
    _log_in(api, "operator")
    for headers in SAME_ORIGIN:
        run_id = insert_run(api.session_factory, owner_id=api.user_ids["operator"])
        response = api.client.post(f"/api/runs/{run_id}/cancel", headers=headers)
        assert response.status_code == 200, (headers, response.text)
        assert _status(api, run_id) == "cancelled"


def test_an_api_token_is_unaffected_by_origin(api: Api) -> None:
    run_id = insert_run(api.session_factory, owner_id=api.user_ids["operator"])
    headers = {**api.as_("operator"), "origin": OTHER_PORT}
    assert api.client.post(f"/api/runs/{run_id}/cancel", headers=headers).status_code == 200


def test_a_form_login_from_another_origin_is_refused_and_sets_no_cookie(api: Api) -> None:
    for origin in (OTHER_PORT, "http://evil.example", None):
        headers = FORM if origin is None else {**FORM, "origin": origin}
        response = api.client.post(
            "/api/auth/login", content=f"username=operator&password={PASSWORD}", headers=headers
        )
        assert response.status_code == 403, (origin, response.text)
        assert "set-cookie" not in response.headers
        assert api.client.get("/api/auth/me").status_code == 401


def test_a_form_login_from_the_same_origin_and_a_json_login_work(api: Api) -> None:
    form = api.client.post(
        "/api/auth/login",
        content=f"username=operator&password={PASSWORD}",
        headers={**FORM, "origin": SERVER},
    )
    assert form.status_code == 200 and "set-cookie" in form.headers
    api.client.cookies.clear()
    assert api.client.post("/api/auth/login", json={"username": "viewer", "password": PASSWORD}).is_success


def test_form_bodies_are_refused_on_json_endpoints(api: Api) -> None:
    """What an HTML form can send never reaches an endpoint that takes JSON, whatever the credential."""
    run_id = insert_run(api.session_factory)
    body: Any = '{"name": "x"}'
    for content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain",
    ):
        for url in (f"/api/runs/{run_id}/cancel", "/api/experiments"):
            response = api.client.post(
                url, content=body, headers={**api.as_("operator"), "content-type": content_type}
            )
            assert response.status_code == 415, response.text
            assert "application/json" in response.json()["error"]["message"]
    assert _status(api, run_id) == "queued"
