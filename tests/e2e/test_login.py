"""Signing in, the header's user and role, and controls hidden from roles that may not use them."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import FinishedRuns, Login, screenshot
from tests.e2e.server import USERNAMES, Server

# one deployment: the sign-in page and its controls: the same code on both
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]


def test_operator_signs_in_with_the_keyboard_and_sees_launch_controls(login: Login, server: Server) -> None:
    page = login("operator")

    expect(page.locator("#user-name")).to_have_text(USERNAMES["operator"])
    expect(page.get_by_role("link", name="Launch", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Launch a run")).to_be_visible()
    # the navigation is reachable from the keyboard: from the top, Tab goes skip link, brand, Runs, Launch
    page.reload()
    expect(page.locator("#user-role")).to_have_text("operator")
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    for _ in range(3):
        page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Launch", exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Launch a run")).to_be_visible()
    screenshot(page, "login-operator-launch")


def test_viewer_sees_no_launch_or_run_controls(
    login: Login, server: Server, finished_runs: FinishedRuns
) -> None:
    run_id = finished_runs.baseline
    page = login("viewer")

    expect(page.locator("#user-role")).to_have_text("viewer")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    expect(row).to_be_visible()
    expect(page.get_by_role("link", name="Launch", exact=True)).to_be_hidden()
    expect(page.get_by_role("link", name="Launch a run")).to_have_count(0)
    expect(row.locator("[data-action]")).to_have_count(0)
    screenshot(page, "viewer-runs")

    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached()
    expect(page.locator("[data-action]")).to_have_count(0)
    page.goto(f"{server.url}/#/launch")
    expect(page.get_by_text("Launching runs needs the operator role")).to_be_visible()
    expect(page.get_by_role("button", name="Launch")).to_have_count(0)
    screenshot(page, "viewer-launch-refused")


def test_wrong_password_is_refused(browser, server: Server) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/")
    page.get_by_label("Username").fill(USERNAMES["viewer"])
    page.get_by_label("Password").fill("not the password")
    page.get_by_label("Password").press("Enter")
    expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
    expect(page.locator("#app-header")).to_be_hidden()
    screenshot(page, "login-refused")
    context.close()
