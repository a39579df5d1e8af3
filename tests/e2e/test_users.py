"""Team administration in the browser: the admin's users page (create, change a role, deactivate),
API tokens (created and shown once, listed, revoked), and every user's password change."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import Server

# one deployment: the users' pages; tests/backend/users covers both databases
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]


def _login_is_refused(browser: Browser, server: Server, username: str, password: str) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
    expect(page.locator("#app-header")).to_be_hidden()
    context.close()


def _create_user(page: Page, username: str, password: str, role: str) -> None:
    form = page.locator("#new-user-form")
    form.get_by_label("Username").fill(username)
    form.get_by_label("Initial password").fill(password)
    form.get_by_label("Role").select_option(role)
    form.get_by_role("button", name="Create user").click()
    expect(page.locator(f"tr[data-user='{username}']")).to_be_visible()


def test_admin_creates_a_viewer_who_sees_no_launch_or_admin_control(
    login: Login, server: Server, browser: Browser
) -> None:
    admin = login("admin")
    admin.get_by_role("link", name="Users").click()
    expect(admin.get_by_role("heading", name="Users", exact=True)).to_be_visible()
    _create_user(admin, "vic", "sunny-meadow-41", "viewer")
    row = admin.locator("tr[data-user='vic']")
    expect(row.get_by_label("Role of vic")).to_have_value("viewer")
    expect(row.locator("[data-col='status']")).to_have_text("active")
    screenshot(admin, "users-created")

    viewer = login("viewer", username="vic", password="sunny-meadow-41")
    # a password an admin set: vic must choose their own before anything else
    expect(viewer.get_by_role("heading", name="Choose your password")).to_be_visible()
    expect(viewer.get_by_role("link", name="Runs")).to_be_hidden()
    viewer.get_by_role("button", name="Choose your password").click()
    dialog = viewer.get_by_role("dialog", name="Change your password")
    dialog.get_by_label("Current password").fill("sunny-meadow-41")
    dialog.get_by_label("New password", exact=True).fill("quiet-harbor-52")
    dialog.get_by_label("New password again").fill("quiet-harbor-52")
    dialog.get_by_role("button", name="Change password").click()
    expect(viewer.get_by_role("link", name="Runs")).to_be_visible()
    expect(viewer.get_by_role("link", name="Launch", exact=True)).to_be_hidden()
    expect(viewer.get_by_role("link", name="Users")).to_be_hidden()
    expect(viewer.get_by_role("link", name="Launch a run")).to_have_count(0)
    expect(viewer.locator("[data-action]")).to_have_count(0)
    expect(viewer.get_by_role("button", name="Change password")).to_be_visible()
    viewer.goto(f"{server.url}/#/users")
    expect(viewer.get_by_text("Managing users and API tokens needs the admin role.")).to_be_visible()
    expect(viewer.locator("form, [data-action]")).to_have_count(0)
    screenshot(viewer, "users-viewer-refused")

    # a new role ends vic's sessions; deactivating stops the login
    row.get_by_label("Role of vic").select_option("operator")
    expect(admin.locator("#toast")).to_have_text("vic is now operator.")
    expect(row.get_by_label("Role of vic")).to_have_value("operator")
    row.get_by_role("button", name="Deactivate vic").click()
    admin.get_by_role("dialog").get_by_role("button", name="Deactivate").click()
    expect(row.locator("[data-col='status']")).to_have_text("deactivated")
    expect(row.locator("[data-action]")).to_have_count(0)
    _login_is_refused(browser, server, "vic", "quiet-harbor-52")


def test_a_user_changes_their_password_from_the_header(
    login: Login, server: Server, browser: Browser
) -> None:
    with server.client() as client:
        body = {"username": "pat", "password": "orange-kettle-7", "role": "operator"}
        client.post("/api/users", json=body).raise_for_status()
    page = login("operator", username="pat", password="orange-kettle-7")

    page.get_by_role("button", name="Change password").click()
    dialog = page.get_by_role("dialog", name="Change your password")
    dialog.get_by_label("Current password").fill("not it at all")
    dialog.get_by_label("New password", exact=True).fill("orange-kettle-8")
    dialog.get_by_label("New password again").fill("orange-kettle-8")
    dialog.get_by_role("button", name="Change password").click()
    expect(dialog.get_by_role("alert")).to_have_text("The current password is wrong.")
    dialog.get_by_label("Current password").fill("orange-kettle-7")
    dialog.get_by_role("button", name="Change password").click()
    expect(dialog).to_have_count(0)
    expect(page.locator("#toast")).to_have_text("Password changed.")
    page.get_by_role("button", name="Log out").click()
    expect(page.locator("#app-header")).to_be_hidden()

    _login_is_refused(browser, server, "pat", "orange-kettle-7")
    again = login("operator", username="pat", password="orange-kettle-8")
    expect(again.locator("#user-name")).to_have_text("pat")


def test_a_token_is_shown_once_and_a_revoked_token_stops_working(login: Login, server: Server) -> None:
    admin = login("admin")
    admin.goto(f"{server.url}/#/users")
    expect(admin.locator("#users-page[data-ready='true']")).to_be_attached()
    form = admin.locator("#new-token-form")
    form.get_by_label("Token name").fill("ci-e2e")
    form.get_by_label("Owner").select_option(label="otto")
    form.get_by_role("button", name="Create token").click()
    secret = admin.locator("#token-secret").inner_text()
    assert secret.startswith("cp_")
    row = admin.locator("tr[data-token='ci-e2e']")
    expect(row.locator("[data-col='status']")).to_have_text("active")
    screenshot(admin, "users-token-created")

    bearer = {"Authorization": f"Bearer {secret}"}
    me = httpx.get(f"{server.url}/api/auth/me", headers=bearer)
    assert me.status_code == 200 and me.json()["username"] == "otto"
    admin.reload()
    expect(admin.locator("tr[data-token='ci-e2e']")).to_be_visible()
    expect(admin.get_by_text(secret)).to_have_count(0)  # the secret is shown once only

    admin.locator("tr[data-token='ci-e2e']").get_by_role("button", name="Revoke ci-e2e").click()
    expect(admin.locator("tr[data-token='ci-e2e'] [data-col='status']")).to_have_text("revoked")
    assert httpx.get(f"{server.url}/api/auth/me", headers=bearer).status_code == 401
