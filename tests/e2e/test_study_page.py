"""Studies and compare as a researcher meets them, on studies stored as their finished runs leave them
(nothing runs: the pages read the stored rows):

- the studies launcher says what a preset cut to fewer rounds than it is written for cannot show;
- a paper-like study (two scenarios × seven policies × two seeds, every run cut to 4 rounds): cell
  labels without the override, the override said once; the figure against the policies as bars with
  95 % whiskers (there is no axis of numbers), against the bases too; 14 round series in 14 colours,
  with a log y axis to choose; no "Target eval loss" on a study that trains nothing, one on a study that
  trains;
- the study's 28 runs hidden from the runs list and the compare picker, or listed alone; the compare
  search kept when "Compare" is pressed; the baseline chosen by run name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import delete, select

from backend.db.engine import make_engine, make_session_factory
from backend.db.models import RoundMetric, Run, Study, User
from backend.runtime.repository import copy_latest_figures
from backend.studies.grid import Axis, Cell
from tests.backend.studies.stored import store_study
from tests.e2e.configs import tiny
from tests.e2e.conftest import Login, screenshot
from tests.e2e.server import USERNAMES, Server

pytestmark = [pytest.mark.e2e, pytest.mark.deployments("embedded")]  # stored rows: one deployment

POLICIES = ("dssda", "uniform", "proportional", "random", "fl", "split", "myopic")
ROUNDS = 4
PLAIN = ("plain alpha", "plain beta")


@dataclass(frozen=True)
class Stored:
    paper: int  # the paper-like study
    paper_runs: list[int]
    trained: int  # a study of simulated runs (they train: eval losses)
    plain: list[int]  # runs of no study, named PLAIN


def _latency(cell: Cell, seed: int, round_index: int) -> float:
    """A latency per policy and seed; bert's fl 100× the rest (the outlier a log y axis is for)."""
    scale = 100.0 if (cell.base, cell.values["scheduler.policy"]) == ("bert", "fl") else 1.0
    return scale * (1.0 + POLICIES.index(cell.values["scheduler.policy"]) + 0.1 * seed + 0.01 * round_index)


def _plain_run(session: Any, owner: int, name: str) -> int:
    config = tiny(rounds=2, executor="analytic")
    run = Run(
        name=name,
        config=config,
        status="succeeded",
        owner_id=owner,
        rounds_done=2,
        total_rounds=2,
        policy="uniform",
        executor="analytic",
        V=1.0,
        num_clusters=config["network"]["num_clusters"],
        devices_per_cluster=config["network"]["devices_per_cluster"],
    )
    session.add(run)
    session.flush()
    for r in range(2):
        record = {"round": r, "num_microbatches": [2, 2], "eval_metrics": {}}
        session.add(RoundMetric(run_id=run.id, round=r, record=record, latency_s=0.5 + r, objective=0.0))
        session.flush()
        copy_latest_figures(session, run.id, r)  # as storing the round does
    return int(run.id)


@pytest.fixture(scope="module")
def stored(server: Server) -> Iterator[Stored]:
    engine = make_engine(server.database_url)
    factory = make_session_factory(engine)
    with factory() as session:
        owner = session.scalar(select(User.id).where(User.username == USERNAMES["operator"]))
        assert owner is not None
        plain = [_plain_run(session, owner, name) for name in PLAIN]
        session.commit()
    analytic = tiny(rounds=ROUNDS, executor="analytic")
    paper = store_study(
        factory,
        owner,
        "paper-like",
        {"transformer": analytic, "bert": analytic},
        [Axis("scheduler.policy", POLICIES), Axis("seed", (1, 2)), Axis("training.rounds", (ROUNDS,))],
        _latency,
        baseline={"scheduler.policy": "uniform"},
    )
    trained = store_study(
        factory,
        owner,
        "trained",
        {"tiny": tiny(rounds=2)},
        [Axis("scheduler.policy", ("uniform", "dssda")), Axis("seed", (1,))],
        lambda cell, seed, r: 1.0,
        eval_loss=lambda cell, seed, r: 2.0 - r,
    )
    with factory() as session:
        paper_runs = list(session.scalars(select(Run.id).where(Run.study_id == paper).order_by(Run.id)))
    try:
        yield Stored(paper, paper_runs, trained, plain)
    finally:
        with factory() as session:
            session.execute(delete(Run).where(Run.id.in_(plain)))
            session.execute(delete(Study).where(Study.id.in_([paper, trained])))
            session.commit()
        engine.dispose()


def _open_study(page: Page, server: Server, study_id: int) -> None:
    page.goto(f"{server.url}/#/studies/{study_id}")
    expect(page.locator("#study-page[data-ready='true']")).to_be_attached()


def _traces(page: Page, chart: str, fields: str) -> Any:
    return page.evaluate(f"() => document.getElementById('{chart}').data.map((t) => ({fields}))")


def test_a_study_of_policies_reads_without_overrides_draws_bars_and_distinct_series(
    login: Login, server: Server, stored: Stored
) -> None:
    page = login("operator")
    # the launcher says what a quick look of a preset written for 100 rounds cannot show
    page.goto(f"{server.url}/#/studies")
    page.get_by_label("Preset").select_option("v-sweep")
    rounds, note = page.get_by_label("Rounds per run"), page.locator("[data-role='fewer-rounds']")
    rounds.fill("5")
    expect(note).to_contain_text("written for 100 rounds per run: 5 show only the start of each run")
    expect(note).to_contain_text("every V schedules alike")
    rounds.fill("100")
    expect(note).to_be_hidden()

    _open_study(page, server, stored.paper)
    # labels name what tells cells apart; the override is said once
    labels = page.locator("#study-table tbody th").all_text_contents()
    assert len(labels) == 14 and labels[0].startswith('transformer, policy="dssda"'), labels
    assert not any("rounds" in label for label in labels), labels
    expect(page.locator("#study-overrides")).to_have_text("Every cell: training.rounds = 4")
    # an analytic study trains nothing: no target eval loss to ask for
    expect(page.get_by_label("Target eval loss")).to_be_hidden()

    # the figure against the policies: a bar per policy and scenario with its 95 % whiskers
    plot = page.locator("#study-plot")
    expect(page.get_by_label("Against", exact=True)).to_have_value("scheduler.policy")
    expect(plot).to_have_attribute("data-points", "14")
    bars = _traces(page, "study-plot", "{type: t.type, name: t.name, x: t.x, whiskers: t.error_y?.array}")
    assert [(b["type"], b["name"], b["x"]) for b in bars] == [
        ("bar", name, list(POLICIES)) for name in ("transformer", "bert")
    ]
    assert all(len(b["whiskers"]) == 7 and all(w > 0 for w in b["whiskers"]) for b in bars), bars
    expect(plot.locator(".bars .point")).to_have_count(14)
    expect(plot.locator(".errorbar")).to_have_count(14)
    screenshot(page, "study-paper-like-bars")
    page.get_by_label("Against", exact=True).select_option("base")
    expect(plot).to_have_attribute("data-points", "14")
    by_base = _traces(page, "study-plot", "{name: t.name, x: t.x}")
    assert [b["x"] for b in by_base] == [["transformer", "bert"]] * 7
    assert by_base[0]["name"] == "scheduler.policy=dssda"

    # 14 round series in 14 colours; the outlier's scale on a log y axis when asked
    series = page.locator("#study-series-plot")
    expect(series).to_have_attribute("data-traces", "14")
    colours = _traces(page, "study-series-plot", "t.line.color")
    assert len(set(colours)) == 14, colours
    assert (
        page.evaluate("() => document.getElementById('study-series-plot')._fullLayout.yaxis.type") == "linear"
    )
    page.get_by_label("Y axis", exact=True).select_option("log")
    expect(series).to_have_attribute("data-y", "log")
    assert page.evaluate("() => document.getElementById('study-series-plot')._fullLayout.yaxis.type") == "log"
    screenshot(page, "study-paper-like-series")

    # a study that trains: its eval loss first, and a target to reach, carried to the exports
    _open_study(page, server, stored.trained)
    expect(page.get_by_label("Field", exact=True)).to_have_value("eval_loss")
    target = page.get_by_label("Target eval loss")
    expect(target).to_be_visible()
    target.fill("0.5")
    target.blur()
    expect(page.locator("a[data-export='html']")).to_have_attribute("href", "/api/studies/"
        f"{stored.trained}/export?format=html&target_eval_loss=0.5")  # fmt: skip


def test_study_runs_are_hidden_or_listed_alone_and_compare_keeps_its_search(
    login: Login, server: Server, stored: Stored
) -> None:
    page = login("viewer")
    listed = page.locator("tbody tr[data-run-id]")

    def listed_ids() -> set[int]:
        return {int(i) for i in listed.evaluate_all("(rows) => rows.map((r) => r.dataset.runId)")}

    # the runs list: study runs hidden, then one study's alone
    expect(page.locator(f"tr[data-run-id='{stored.paper_runs[-1]}']")).to_be_visible()  # the newest runs
    studies = page.get_by_label("Studies", exact=True)
    studies.select_option("none")
    expect(page.locator(f"tr[data-run-id='{stored.paper_runs[-1]}']")).to_have_count(0)
    expect(page.locator(f"tr[data-run-id='{stored.plain[0]}']")).to_be_visible()
    assert listed_ids().isdisjoint(stored.paper_runs)
    studies.select_option(str(stored.paper))
    expect(listed).to_have_count(len(stored.paper_runs))
    assert listed_ids() == set(stored.paper_runs)
    # the study page links to its runs in the list
    _open_study(page, server, stored.paper)
    page.get_by_role("link", name="Its runs in the runs list").click()
    expect(listed).to_have_count(len(stored.paper_runs))
    expect(page.get_by_label("Studies", exact=True)).to_have_value(str(stored.paper))

    # compare: study runs hidden from the picker, a search, and the baseline by name
    page.goto(f"{server.url}/#/compare")
    picker = page.locator("input[data-run-id]")
    expect(page.locator(f"input[data-run-id='{stored.paper_runs[-1]}']")).to_be_attached()
    page.get_by_label("Studies", exact=True).select_option("none")
    expect(page.locator(f"input[data-run-id='{stored.paper_runs[-1]}']")).to_have_count(0)
    expect(page.locator(f"input[data-run-id='{stored.plain[0]}']")).to_be_attached()
    picked = picker.evaluate_all("(boxes) => boxes.map((box) => Number(box.dataset.runId))")
    assert set(picked).isdisjoint(stored.paper_runs)
    page.get_by_label("Find runs").fill("plain")
    expect(picker).to_have_count(2)
    for run_id in stored.plain:
        page.locator(f"input[data-run-id='{run_id}']").check()
    baseline = page.get_by_label("Baseline", exact=True)
    by_name = [f"{name} (#{i})" for name, i in zip(PLAIN, stored.plain, strict=True)]
    assert baseline.locator("option").all_text_contents() == by_name
    baseline.select_option(label=f"{PLAIN[1]} (#{stored.plain[1]})")
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.locator("#compare-table tbody tr")).to_have_count(2)
    expect(page.locator(f"#compare-table tr[data-run-id='{stored.plain[1]}']")).to_contain_text("baseline")
    # pressing Compare kept the search, the filter and the picks
    expect(page.get_by_label("Find runs")).to_have_value("plain")
    expect(page.get_by_label("Studies", exact=True)).to_have_value("none")
    expect(picker).to_have_count(2)
    expect(baseline).to_have_value(str(stored.plain[1]))
    assert baseline.locator("option").all_text_contents() == by_name
    screenshot(page, "compare-search-kept")
