"""A study's runs in the runs list (GET /api/runs): hidden with in_study=false, listed alone with
in_study=true or, one study's, with study_id (a study of 85 runs otherwise floods the list)."""

from __future__ import annotations

from typing import Any

import pytest

from backend.studies.grid import Axis
from tests.backend.builders import insert_run, tiny_config
from tests.backend.conftest import Api
from tests.backend.studies.stored import store_study

pytestmark = pytest.mark.deployments("embedded")  # a filter of one query: one database is enough


def _listed(api: Api, **params: Any) -> list[int]:
    response = api.client.get("/api/runs", params=params, headers=api.as_("viewer"))
    assert response.status_code == 200, response.text
    return sorted(item["id"] for item in response.json()["items"])


def _study(api: Api, name: str) -> int:
    axes = [Axis("scheduler.policy", ("dssda", "uniform"))]
    owner = api.user_ids["operator"]
    return store_study(api.session_factory, owner, name, {"tiny": tiny_config()}, axes, lambda c, s, r: 1.0)


def test_study_runs_are_hidden_listed_alone_or_listed_by_study(api: Api) -> None:
    plain = insert_run(api.session_factory, name="plain run")
    first, second = _study(api, "first"), _study(api, "second")
    everything = _listed(api)
    assert len(everything) == 5 and plain in everything
    assert _listed(api, in_study="false") == [plain]
    in_studies = [i for i in everything if i != plain]
    assert _listed(api, in_study="true") == in_studies
    assert _listed(api, study_id=first) == in_studies[:2]
    assert _listed(api, study_id=second, search="SECOND") == in_studies[2:]
    assert _listed(api, study_id=second + 1) == []
    page = api.client.get("/api/runs", params={"in_study": "false"}, headers=api.as_("viewer")).json()
    assert page["total"] == 1


def test_a_bad_study_filter_is_refused_naming_the_field(api: Api) -> None:
    for params, field in (
        ({"in_study": "maybe"}, "query.in_study"),
        ({"study_id": "0"}, "query.study_id"),
        ({"study_id": "x"}, "query.study_id"),
        ({"study_id": "1", "in_study": "false"}, "study_id"),
    ):
        response = api.client.get("/api/runs", params=params, headers=api.as_("viewer"))
        assert response.status_code == 422, (params, response.text)
        details = response.json()["error"]["details"]
        assert [d["field"] for d in details] == [field], (params, details)
    params = {"study_id": "1", "in_study": "false"}
    both = api.client.get("/api/runs", params=params, headers=api.as_("viewer"))
    assert "in_study=false" in both.json()["error"]["message"]
