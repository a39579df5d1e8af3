"""Saved experiments: create (validated), list/search, update, clone, delete refused while used."""

from __future__ import annotations

from tests.backend.builders import tiny_config
from tests.backend.conftest import Api


def test_create_stores_the_config_with_defaults_filled_in(api: Api) -> None:
    response = api.client.post(
        "/api/experiments", json={"config": tiny_config()}, headers=api.as_("operator")
    )
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "tiny" and body["owner_id"] == api.user_ids["operator"]
    assert body["config"]["channel"]["bandwidth_hz"] == 10.0e6  # a default, now explicit
    assert api.client.get(f"/api/experiments/{body['id']}", headers=api.as_("viewer")).json() == body


def test_a_bad_config_is_422_naming_each_field(api: Api) -> None:
    config = tiny_config(model={"num_heads": 3}, training={"rounds": 0})
    response = api.client.post("/api/experiments", json={"config": config}, headers=api.as_("operator"))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_config"
    fields = {d["field"]: d for d in error["details"]}
    assert {"config.training.rounds", "config.model"} <= set(fields)
    assert fields["config.training.rounds"]["value"] == 0


def test_list_searches_and_paginates(api: Api) -> None:
    for name in ("alpha sweep", "beta", "Alpha two"):
        api.client.post(
            "/api/experiments", json={"name": name, "config": tiny_config()}, headers=api.as_("operator")
        )
    page = api.client.get(
        "/api/experiments", params={"search": "alpha", "limit": 1}, headers=api.as_("viewer")
    ).json()
    assert page["total"] == 2 and len(page["items"]) == 1 and page["items"][0]["name"] == "Alpha two"


def test_update_and_clone(api: Api) -> None:
    op = api.as_("operator")
    created = api.client.post("/api/experiments", json={"config": tiny_config()}, headers=op).json()
    updated = api.client.patch(
        f"/api/experiments/{created['id']}",
        json={"config": tiny_config(seed=9), "name": "seed 9"},
        headers=op,
    )
    assert updated.status_code == 200 and updated.json()["config"]["seed"] == 9
    bad = api.client.patch(f"/api/experiments/{created['id']}", json={"config": {"seed": -1}}, headers=op)
    assert bad.status_code == 422 and bad.json()["error"]["details"][0]["field"] == "config.seed"
    clone = api.client.post(f"/api/experiments/{created['id']}/clone", headers=op)
    assert clone.status_code == 201 and clone.json()["name"] == "seed 9 (copy)"
    assert clone.json()["config"] == updated.json()["config"]


def test_delete_is_refused_while_a_run_uses_the_experiment(api: Api) -> None:
    created = api.client.post(
        "/api/experiments", json={"config": tiny_config()}, headers=api.as_("operator")
    ).json()
    run = api.client.post(
        "/api/runs", json={"experiment_id": created["id"]}, headers=api.as_("operator")
    ).json()
    refused = api.client.delete(f"/api/experiments/{created['id']}", headers=api.as_("admin"))
    assert refused.status_code == 409 and refused.json()["error"]["details"] == {"runs": 1, "active_runs": 1}
    api.client.post(f"/api/runs/{run['id']}/cancel", headers=api.as_("operator"))
    assert api.client.delete(f"/api/runs/{run['id']}", headers=api.as_("admin")).status_code == 204
    assert api.client.delete(f"/api/experiments/{created['id']}", headers=api.as_("admin")).status_code == 204
    assert api.client.get(f"/api/experiments/{created['id']}", headers=api.as_("viewer")).status_code == 404
