"""A study's round series per cell (GET /api/studies/{id}/series) on both deployments: per cell the
mean over its runs of a round field at the rounds every run has, with the mean modeled elapsed time,
equal to the mean recomputed from the runs' own /rounds series; downsampled along the chosen x; a
bad field is refused naming it."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from backend.db.models import RoundMetric, Run
from backend.metrics.schemas import Series
from backend.studies.series import cell_mean
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api
from tests.backend.deployments import wait_terminal
from tests.backend.studies.execution import run_here
from tests.deployment_params import EMBEDDED

ROUNDS = 3


def test_a_cells_mean_is_over_the_rounds_every_run_has() -> None:
    behind = Series(round=[0, 1, 3], value=[4.0, 3.0, 1.0], elapsed_s=[1.0, 2.0, 4.0])  # no value at 2
    ahead = Series(round=[0, 1, 2, 3, 4], value=[2.0, 1.0, 0.5, 0.0, 9.0], elapsed_s=[2, 4, 6, 8, 10])
    rounds, values, elapsed = cell_mean([behind, ahead])
    assert rounds.tolist() == [0, 1, 3]
    assert values.tolist() == [3.0, 2.0, 0.5]
    assert elapsed.tolist() == [1.5, 3.0, 6.0]
    assert [a.tolist() for a in cell_mean([])] == [[], [], []]


def _study(api: Api, tmp_path: Path, deployment: str) -> dict[str, Any]:
    """Two cells (policies) × two seeds of a training run, executed; the study's detail."""
    body = {
        "name": "series",
        "bases": [{"config": tiny_config(executor="simulated", training={"rounds": ROUNDS})}],
        "axes": [
            {"field": "scheduler.policy", "values": ["uniform", "proportional"]},
            {"field": "seed", "values": [0, 1]},
        ],
    }
    created = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert created.status_code == 201, created.text
    study_id = created.json()["id"]
    if deployment == EMBEDDED:  # in this process: four spawned processes would cost seconds each
        statuses = run_here(api, study_id, tmp_path)
    else:
        api.dispatcher.release()
        with api.session_factory() as session:
            ids = list(session.scalars(select(Run.id).where(Run.study_id == study_id)))
        statuses = [wait_terminal(api.session_factory, run_id) for run_id in ids]
    assert statuses == ["succeeded"] * 4
    detail: dict[str, Any] = api.client.get(f"/api/studies/{study_id}", headers=api.as_("viewer")).json()
    return detail


def _run_series(api: Api, run_id: int, field: str) -> dict[str, list[float]]:
    answer = api.client.get(
        f"/api/runs/{run_id}/rounds", params={"fields": field, "method": "none"}, headers=api.as_("viewer")
    )
    assert answer.status_code == 200, answer.text
    series: dict[str, list[float]] = answer.json()["series"][field]
    return series


def _expected(api: Api, cell: dict[str, Any], field: str) -> tuple[list[float], list[float], list[float]]:
    """The cell's mean recomputed here from its runs' /rounds series."""
    runs = [_run_series(api, r["id"], field) for r in cell["runs"]]
    common = sorted(set.intersection(*(set(r["round"]) for r in runs)))
    at = [{x: i for i, x in enumerate(r["round"])} for r in runs]
    values = [statistics.fmean(r["value"][a[x]] for r, a in zip(runs, at, strict=True)) for x in common]
    elapsed = [statistics.fmean(r["elapsed_s"][a[x]] for r, a in zip(runs, at, strict=True)) for x in common]
    return common, values, elapsed


def test_each_cell_is_the_mean_of_its_runs_round_series(api: Api, deployment: str, tmp_path: Path) -> None:
    detail = _study(api, tmp_path, deployment)
    study_id = detail["id"]
    # one run of cell 0 is a round behind (as a run still going is): the cell keeps the rounds both have
    behind = detail["cells"][0]["runs"][1]["id"]
    with api.session_factory() as session:
        session.execute(
            delete(RoundMetric).where(RoundMetric.run_id == behind, RoundMetric.round == ROUNDS - 1)
        )
        session.commit()

    url = f"/api/studies/{study_id}/series"
    for field in ("eval_loss", "latency_s", "eval_accuracy"):
        answer = api.client.get(url, params={"field": field}, headers=api.as_("viewer"))
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert (got["field"], got["x"], got["unit"]) == (field, "round", "s" if field == "latency_s" else "1")
        assert "train_loss" in got["fields"] and "eval_perplexity" in got["fields"]
        assert [(c["index"], c["label"], c["values"]) for c in got["cells"]] == [
            (c["index"], c["label"], c["values"]) for c in detail["cells"]
        ]
        for cell, summary in zip(got["cells"], detail["cells"], strict=True):
            rounds, values, elapsed = _expected(api, summary, field)
            assert cell["num_runs"] == 2 and cell["num_points"] == len(rounds)
            assert cell["round"] == rounds
            assert cell["value"] == pytest.approx(values, rel=1e-12)
            assert cell["elapsed_s"] == pytest.approx(elapsed, rel=1e-12)
        assert got["cells"][0]["round"] == list(range(ROUNDS - 1))
        assert got["cells"][1]["round"] == list(range(ROUNDS))

    # downsampled on the server along the chosen x: the first and last points stay (LTTB)
    full = api.client.get(url, params={"field": "eval_loss"}, headers=api.as_("viewer")).json()["cells"][1]
    for x in ("round", "elapsed"):
        params: dict[str, Any] = {"field": "eval_loss", "x": x, "max_points": 2}
        cut = api.client.get(url, params=params, headers=api.as_("viewer")).json()
        assert cut["x"] == x and cut["max_points"] == 2
        cell = cut["cells"][1]
        assert cell["num_points"] == ROUNDS and len(cell["value"]) == 2
        for key in ("round", "value", "elapsed_s"):
            assert cell[key] == pytest.approx([full[key][0], full[key][-1]], rel=1e-12)


@pytest.mark.deployments(EMBEDDED)
def test_a_bad_field_is_refused_naming_it_and_reading_needs_a_viewer(api: Api) -> None:
    body = {"name": "s", "bases": [{"config": tiny_config()}], "axes": [{"field": "seed", "values": [0, 1]}]}
    study_id = api.client.post("/api/studies", json=body, headers=api.as_("operator")).json()["id"]
    url = f"/api/studies/{study_id}/series"
    bad = api.client.get(url, params={"field": "eval_los"}, headers=api.as_("viewer"))
    assert bad.status_code == 422, bad.text
    error = bad.json()["error"]
    assert "eval_los" in error["message"] and "eval_loss" in error["message"]
    assert error["details"] == [{"field": "field", "value": "eval_los", "message": "not a round field"}]
    wrong_x = api.client.get(url, params={"x": "time"}, headers=api.as_("viewer"))
    assert wrong_x.status_code == 422
    assert api.client.get(url).status_code == 401
    assert api.client.get("/api/studies/999/series", headers=api.as_("viewer")).status_code == 404

    # queued runs have no rounds yet: every cell is there, empty
    queued = api.client.get(url, params={"field": "latency_s"}, headers=api.as_("viewer")).json()
    assert [(c["num_runs"], c["round"], c["value"]) for c in queued["cells"]] == [(2, [], [])]
    with api.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(RoundMetric)) == 0
