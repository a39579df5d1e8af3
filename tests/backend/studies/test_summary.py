"""What a study reads as (GET /api/studies/{id} and its round series) from its stored rows: cell labels
without the overrides, the overrides on their own, the axes a figure is drawn against, and whether
its runs train anything (an analytic study has no eval loss to reach)."""

from __future__ import annotations

from typing import Any

import pytest

from backend.studies.grid import Axis
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api
from tests.backend.studies.stored import store_study

pytestmark = pytest.mark.deployments("embedded")  # reads of stored rows: one database is enough

AXES = [
    Axis("scheduler.policy", ("dssda", "uniform")),
    Axis("seed", (1, 2)),
    Axis("training.rounds", (3,)),  # the launcher's "Rounds per run": an override
]


def _stored(api: Api, executor: str) -> int:
    return store_study(
        api.session_factory,
        api.user_ids["operator"],
        f"{executor} study",
        {"tiny": tiny_config(executor=executor)},
        AXES,
        latency_s=lambda cell, seed, r: 1.0 + seed + r,
        eval_loss=None if executor == "analytic" else lambda cell, seed, r: 2.0 - 0.1 * r,
    )


def _read(api: Api, path: str, **params: Any) -> dict[str, Any]:
    response = api.client.get(path, params=params, headers=api.as_("viewer"))
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_overrides_stay_out_of_labels_and_of_the_axes_a_figure_is_drawn_against(api: Api) -> None:
    study_id = _stored(api, "analytic")
    detail = _read(api, f"/api/studies/{study_id}")
    assert [c["label"] for c in detail["cells"]] == ['policy="dssda"', 'policy="uniform"']
    assert detail["axes"] == ["scheduler.policy"]
    assert detail["overrides"] == {"training.rounds": 3}
    assert detail["figure_axes"] == [{"field": "scheduler.policy", "numeric": False, "log": False}]
    series = _read(api, f"/api/studies/{study_id}/series", field="latency_s")
    assert [c["label"] for c in series["cells"]] == ['policy="dssda"', 'policy="uniform"']


def test_an_analytic_study_trains_nothing_and_a_simulated_one_does(api: Api) -> None:
    analytic = _read(api, f"/api/studies/{_stored(api, 'analytic')}")
    assert (analytic["trains"], analytic["series_field"]) == (False, "latency_s")
    simulated = _read(api, f"/api/studies/{_stored(api, 'simulated')}")
    assert (simulated["trains"], simulated["series_field"]) == (True, "eval_loss")
