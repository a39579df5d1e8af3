"""Live updates in the browser (frontend/js/live.js) survive outages; the run page keeps drawing every
round without a reload.

- The database stops for 20 s under an open stream (a PostgreSQL server of the test's own, stopped
  and started again): the run waits, the stream stays open, and every round after is drawn.
- The event stream is refused (503, as while the database restarts, or a proxy's 502 while the API
  restarts): EventSource stops for good on such an answer, so live.js opens it again with a
  backoff; once a finished run's stream answers 204, it stops asking.
- A round event of a large run carries its first device records: live.js fetches the rest before
  the page gets the event.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, expect

from tests.backend.builders import PACED_POLICY, TEST_POLICIES
from tests.e2e.configs import tiny
from tests.e2e.conftest import screenshot
from tests.e2e.server import PASSWORDS, USERNAMES, Server, _serve
from tests.integration.postgres_server import OwnPostgres, own_postgres

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

OUTAGE_S = 20.0
REPO = Path(__file__).resolve().parents[2]
TERMINAL = ("succeeded", "failed", "cancelled")


def _paced(rounds: int) -> dict[str, Any]:
    """An analytic run at about four rounds a second (the registered test policy paced-uniform)."""
    config = tiny(rounds=rounds, executor="analytic")
    config["scheduler"]["policy"] = PACED_POLICY
    return config


@pytest.fixture(scope="module")
def postgres() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


@pytest.fixture(scope="module")
def served(postgres: OwnPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``collapipe serve`` with the local executor on the test's own PostgreSQL server."""
    env = {"COLLAPIPE_POLICIES": json.dumps(TEST_POLICIES), "PYTHONPATH": str(REPO)}
    with _serve(tmp_path_factory.mktemp("live"), postgres.url, "local", env) as server:
        yield server


@pytest.fixture
def viewer(browser: Browser, served: Server) -> Iterator[Page]:
    """A page signed in as the viewer; no uncaught error may happen in it."""
    context: BrowserContext = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{served.url}/")
    page.get_by_label("Username").fill(USERNAMES["viewer"])
    page.get_by_label("Password").fill(PASSWORDS["viewer"])
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#user-role")).to_have_text("viewer")
    yield page
    context.close()
    assert not errors, errors


def _wait(server: Server, run_id: int, until: Any, timeout_s: float) -> dict[str, Any]:
    """The run once ``until(run)``; requests answered otherwise (503 in an outage) are asked again."""
    deadline = time.monotonic() + timeout_s
    with server.client() as client:
        while True:
            response = client.get(f"/api/runs/{run_id}")
            if response.status_code == 200 and until(response.json()):
                run: dict[str, Any] = response.json()
                return run
            assert time.monotonic() < deadline, f"run {run_id}: {response.text[:300]}\n{server.log()[-3000:]}"
            time.sleep(0.1)


def _open_run(page: Page, url: str, run_id: int) -> int:
    """Open the run's page; the rounds its history shows (those the run's detail counted when the page
    loaded it: the stream draws the ones after)."""
    with page.expect_response(re.compile(rf"/api/runs/{run_id}$")) as detail:
        page.goto(f"{url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached(timeout=30_000)
    history: int = detail.value.json()["rounds_done"]
    return history


def _drawn(page: Page) -> list[int]:
    """The rounds the page drew from its live stream, in drawing order."""
    drawn: list[int] = page.evaluate("() => window.collapipeStats.draws.map(d => d.round)")
    return drawn


def _drawn_to_the_end(page: Page, rounds: int, timeout_s: float = 60.0) -> list[int]:
    """``_drawn`` once the page drew the last round (polled here: the page's CSP forbids the string
    evaluation Playwright's wait_for_function polls with)."""
    deadline = time.monotonic() + timeout_s
    while rounds - 1 not in (drawn := _drawn(page)):
        assert time.monotonic() < deadline, f"the page drew {drawn}, not round {rounds - 1}"
        page.wait_for_timeout(100)
    return drawn


def test_a_database_outage_under_an_open_stream_loses_no_round_on_the_page(
    viewer: Page, served: Server, postgres: OwnPostgres
) -> None:
    rounds = 40
    run_id = served.launch(_paced(rounds), name="through an outage")
    _wait(served, run_id, lambda r: r["rounds_done"] >= 2, 60)
    history = _open_run(viewer, served.url, run_id)
    expect(viewer.get_by_text("● live")).to_be_visible(timeout=15_000)
    deadline = time.monotonic() + 30
    while len(_drawn(viewer)) < 2:
        assert time.monotonic() < deadline, "no live round drawn"
        viewer.wait_for_timeout(100)

    postgres.stop()
    time.sleep(OUTAGE_S)
    postgres.start()

    run = _wait(served, run_id, lambda r: r["status"] in TERMINAL, 180)
    assert run["status"] == "succeeded", run
    # every round after those of the history, once and in order, without a reload
    assert _drawn_to_the_end(viewer, rounds) == list(range(history, rounds))
    progress = viewer.locator(".progress[aria-label='rounds done']")
    expect(progress).to_have_attribute("aria-valuenow", str(rounds))
    screenshot(viewer, "run-after-a-database-outage")


def test_a_refused_stream_is_opened_again_with_backoff_until_the_run_is_finished(
    viewer: Page, served: Server
) -> None:
    rounds = 16
    run_id = served.launch(_paced(rounds), name="refused stream")
    _wait(served, run_id, lambda r: r["status"] == "running", 60)
    requests: list[str] = []
    refusals = {"left": 3}

    def refuse_at_first(route: Route) -> None:
        requests.append(route.request.url)
        if refusals["left"] > 0:
            refusals["left"] -= 1
            route.fulfill(status=503, headers={"Retry-After": "1"}, body='{"error": {"code": "x"}}')
        else:
            route.continue_()

    viewer.route(re.compile(rf"/api/runs/{run_id}/events"), refuse_at_first)
    history = _open_run(viewer, served.url, run_id)
    assert _drawn_to_the_end(viewer, rounds) == list(range(history, rounds))
    assert refusals["left"] == 0
    # the finished run's stream ends; EventSource's reconnect gets 204, which stops it; live.js asks
    # once after the last event (204 again) and then stops asking
    expect(viewer.locator("h1 ~ .status").first).to_have_attribute("data-status", "succeeded", timeout=15_000)
    last = _wait(served, run_id, lambda r: True, 10)["last_event_id"]
    deadline = time.monotonic() + 30
    while not any(url.endswith(f"after={last}") for url in requests):
        assert time.monotonic() < deadline, requests
        viewer.wait_for_timeout(100)
    asked = len(requests)
    viewer.wait_for_timeout(5000)  # longer than the stream's retry (2 s) and live.js's first backoff
    assert requests[asked:] == []


def test_a_round_event_without_all_its_devices_reaches_the_page_whole(viewer: Page) -> None:
    """live.js on its own: a round event that carries 2 of its 5 device records and devices_total;
    the handler gets the event with all 5, fetched a page at a time, and events stay in order."""
    devices = [{"device_id": f"c0-d{k}", "round": 3} for k in range(5)]
    event = {"round": {"round": 3}, "devices": devices[:2], "devices_total": 5}
    stream = (
        "retry: 60000\n\n"
        f"id: 11\nevent: round\ndata: {json.dumps(event)}\n\n"
        f"id: 12\nevent: status\ndata: {json.dumps({'run_id': 9, 'status': 'succeeded'})}\n\n"
    )
    pages: list[str] = []

    def devices_page(route: Route) -> None:
        pages.append(route.request.url)
        query = dict(part.split("=") for part in route.request.url.split("?")[1].split("&"))
        offset, limit = int(query["offset"]), min(int(query["limit"]), 2)  # a small page size
        body = {"run_id": 9, "round": 3, "items": devices[offset : offset + limit], "total": 5}
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    viewer.route(
        re.compile(r"/api/runs/9/events"),
        lambda r: r.fulfill(status=200, content_type="text/event-stream", body=stream),
    )
    viewer.route(re.compile(r"/api/runs/9/rounds/3/devices"), devices_page)
    received = viewer.evaluate(
        """async () => {
            const { subscribe } = await import('/js/live.js');
            const got = [];
            await new Promise((resolve) => {
                const close = subscribe('/api/runs/9/events', {
                    round: (data, id) => got.push(
                        ['round', id, data.devices.map((d) => d.device_id), 'devices_total' in data]),
                    status: (data, id) => { got.push(['status', id]); close(); resolve(); },
                });
            });
            return got;
        }"""
    )
    assert received == [
        ["round", "11", [d["device_id"] for d in devices], False],
        ["status", "12"],
    ]
    assert [re.sub(r".*\?", "", url) for url in pages] == ["offset=2&limit=1000", "offset=4&limit=1000"]
