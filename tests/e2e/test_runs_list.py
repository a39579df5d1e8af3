"""The runs list: a page of 50 runs, with every column, from one request."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect
from sqlalchemy import delete, select

from backend.db.engine import make_engine, make_session_factory
from backend.db.models import RoundMetric, Run, User
from backend.runtime.repository import copy_latest_figures
from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, counted_api_requests, screenshot
from tests.e2e.server import USERNAMES, Server

# one deployment: the list's requests and columns are the page's; tests/backend lists runs on both databases
pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]

LISTED = 50
RUNS_LISTING = re.compile(r"/api/runs(\?|$)")  # the listing, not /api/runs/events or a run's


@pytest.fixture
def listed_runs(server: Server) -> Iterator[list[int]]:
    """50 finished runs of the operator, stored as a finished run leaves its rows; the newest first.
    Every other one was evaluated in its last round."""
    engine = make_engine(server.database_url)
    factory = make_session_factory(engine)
    ids: list[int] = []
    try:
        with factory() as session:
            owner = session.scalar(select(User.id).where(User.username == USERNAMES["operator"]))
            for n in range(LISTED):
                config = tiny(rounds=4, executor="analytic", V=float(n + 1))
                run = Run(
                    name=f"listed {n}",
                    config=config,
                    status="succeeded",
                    owner_id=owner,
                    rounds_done=4,
                    total_rounds=4,
                    policy="uniform",
                    executor="analytic",
                    V=float(n + 1),
                    num_clusters=config["network"]["num_clusters"],
                    devices_per_cluster=config["network"]["devices_per_cluster"],
                )
                session.add(run)
                session.flush()
                evaluated = n % 2 == 0
                record = {"round": 3, "eval_metrics": {"eval_accuracy": 0.5} if evaluated else {}}
                session.add(
                    RoundMetric(
                        run_id=run.id,
                        round=3,
                        record=record,
                        latency_s=0.25,
                        objective=1.0,
                        eval_loss=0.75 if evaluated else None,
                    )
                )
                session.flush()
                copy_latest_figures(session, run.id, 3)  # as storing the round does
                ids.append(run.id)
            session.commit()
        yield ids[::-1]
    finally:
        with factory() as session:
            session.execute(delete(Run).where(Run.id.in_(ids)))
            session.commit()
        engine.dispose()


def test_a_page_of_50_runs_is_one_request(login: Login, server: Server, listed_runs: list[int]) -> None:
    page = login("viewer")
    requests = counted_api_requests(page)
    page.reload()  # the runs list, loaded from scratch
    rows = page.locator("tbody tr[data-run-id]")
    expect(rows).to_have_count(LISTED)
    page.wait_for_load_state("networkidle")
    assert len(requests) <= 3, requests
    newest, oldest = (
        page.locator(f"tr[data-run-id='{run_id}'] td") for run_id in (listed_runs[0], listed_runs[-1])
    )
    # select, run, status, progress, policy, V, clusters × devices, latency, eval, owner: rounds are
    # counted as the progress counts them, no round's 0-based index (3) beside "4/4"
    assert "Round" not in page.locator("thead th").all_text_contents()
    expect(newest.nth(3)).to_have_text("4/4")
    expect(newest.nth(5)).to_have_text("50")
    expect(newest.nth(6)).to_have_text("2 × 4")
    expect(newest.nth(7)).to_have_text("250 ms")
    expect(newest.nth(7)).to_have_attribute("title", "latency_s of the last of 4 rounds done")
    expect(newest.nth(8)).to_have_text("—")  # not evaluated
    expect(newest.nth(9)).to_have_text("otto")
    assert "3" not in newest.all_inner_texts()
    expect(oldest.nth(5)).to_have_text("1")
    expect(oldest.nth(8)).to_contain_text("0.5")  # its eval_accuracy
    expect(oldest.nth(8)).to_contain_text("accuracy")
    expect(oldest.nth(8)).to_have_attribute("title", "eval_accuracy after 4 of 4 rounds")
    screenshot(page, "runs-list-50")


NO_RUNS = {"items": [], "total": 0, "limit": LISTED, "offset": 0}


@pytest.mark.deployments("embedded")  # the page's own behaviour: one deployment is enough
def test_no_runs_at_all_points_a_new_user_to_the_quickstart(login: Login, server: Server) -> None:
    """A server without runs (its listing answered empty: the session's server has runs): an operator
    gets a button to the launch form on the quickstart preset, a viewer is told who launches; a filter
    that matches nothing still says so."""
    operator = login("operator")
    operator.route(RUNS_LISTING, lambda route: route.fulfill(json=NO_RUNS))
    operator.goto(f"{server.url}/#/runs")
    empty = operator.locator("[data-role='no-runs']")
    expect(empty).to_contain_text("No runs yet.")
    start = empty.get_by_role("link", name="Launch the quickstart")
    expect(start).to_be_visible()
    start.click()
    expect(operator).to_have_url(re.compile(r"#/launch\?preset=quickstart$"))
    expect(operator.get_by_label("Preset")).to_have_value("quickstart")

    operator.goto(f"{server.url}/#/runs?search=no-such-run")
    expect(operator.get_by_role("table", name="Runs")).to_contain_text("No runs match.")
    expect(operator.locator("[data-role='no-runs']")).to_have_count(0)

    viewer = login("viewer")
    viewer.route(RUNS_LISTING, lambda route: route.fulfill(json=NO_RUNS))
    viewer.goto(f"{server.url}/#/runs")
    told = viewer.locator("[data-role='no-runs']")
    expect(told).to_contain_text("ask an administrator for the operator role")
    expect(viewer.get_by_role("link", name="Launch the quickstart")).to_have_count(0)
