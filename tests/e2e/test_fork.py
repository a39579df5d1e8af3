"""The fork dialog: its policy is a choice of the server's policies (no free text), and the fork
opens on its own page, whose header links its parent."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import FinishedRuns, Login
from tests.e2e.server import Server

# one deployment: the fork dialog and page (tests/backend forks on both databases,
# test_model_download forks on production)
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]


def test_fork_with_another_policy_chosen_from_the_servers(
    login: Login, server: Server, finished_runs: FinishedRuns
) -> None:
    run_id = finished_runs.baseline
    with server.client() as client:
        policies = client.get("/api/config/policies").raise_for_status().json()
    page = login("admin")  # the shared runs are the admin's: only their owner or an admin forks them
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator("[data-ready='true']")).to_be_attached()
    page.get_by_role("button", name=f"Fork run {run_id}").first.click()
    dialog = page.get_by_role("dialog", name=f"Fork run {run_id}")
    policy = dialog.get_by_label("Policy")
    expect(policy).to_have_value("uniform")  # the parent's
    expect(policy.locator("option")).to_have_count(len(policies))
    assert sorted(policy.locator("option").all_inner_texts()) == sorted(policies)
    policy.select_option("dssda")
    dialog.get_by_label("Start at round k").fill("5")
    dialog.get_by_role("button", name="Fork").click()

    # the page moves to the fork's own address and shows the fork
    expect(page).not_to_have_url(re.compile(rf"#/runs/{run_id}$"))
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"))
    fork_id = int(page.url.rsplit("/", 1)[1])
    with server.client() as client:
        fork = client.get(f"/api/runs/{fork_id}").raise_for_status().json()
    assert fork["policy"] == "dssda" and fork["parent_run_id"] == run_id and fork["fork_round"] == 5
    expect(page.get_by_role("heading", level=1)).to_have_text(fork["name"])
    # its header says whose fork it is in words, the parent a link (not the link's address as text)
    meta = page.locator("main > p.small.muted").first
    expect(meta).to_contain_text(f"#{fork_id} ·")
    expect(meta).to_contain_text(f"· fork of #{run_id} at round 5 ·")
    expect(meta).not_to_contain_text("http")
    meta.get_by_role("link", name=f"#{run_id}").click()
    expect(page).to_have_url(re.compile(rf"#/runs/{run_id}$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("uniform M=4")
