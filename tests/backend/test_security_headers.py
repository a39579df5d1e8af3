"""Every response carries the security headers: a Content-Security-Policy that allows no inline script,
nothing from another origin and no framing, nosniff and a same-origin referrer; /docs loads nothing
from another host."""

from __future__ import annotations

import re

import pytest

from tests.backend.conftest import Api

pytestmark = pytest.mark.deployments("embedded")  # headers of the HTTP layer: one deployment is enough


PAGES = [
    ("/", None),
    ("/js/main.js", None),
    ("/healthz", None),
    ("/docs", None),
    ("/openapi.json", None),
    ("/api/runs", None),  # 401
    ("/api/runs", "viewer"),
    ("/api/nope", "viewer"),  # 404
]


def test_every_response_has_the_security_headers(api: Api) -> None:
    for path, role in PAGES:
        response = api.client.get(path, headers=api.as_(role) if role else {})
        directives = response.headers["content-security-policy"].split(";")
        policy = dict(directive.strip().split(" ", 1) for directive in directives)
        assert policy["default-src"] == "'self'", path
        assert policy["script-src"] == "'self'"  # no inline script, no eval, nothing from elsewhere
        assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
        assert policy["form-action"] == "'self'" and policy["base-uri"] == "'none'"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
        assert response.headers["x-frame-options"] == "DENY"


def test_the_api_reference_is_served_from_this_server(api: Api) -> None:
    page = api.client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", page.text), "loads something from another host"
    for asset in re.findall(r"(?:src|href)=\"(/[^\"]+)\"", page.text):
        assert api.client.get(asset).status_code == 200, asset
    assert api.client.get("/redoc").status_code == 404
    assert "/api/runs" in api.client.get("/openapi.json").json()["paths"]
