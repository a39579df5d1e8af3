"""The shipped study presets: valid studies, and the paper comparison's per-cell means for the
scenarios' own seed equal the modeled figures `collapipe bench paper` prints (at reduced rounds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.studies.presets import PRESETS_DIR, load_study_file, presets
from bench import paper
from tests.backend.conftest import Api
from tests.backend.studies.execution import run_here

ROUNDS = 3
BENCH_FIGURES = (
    "mean_latency_s",
    "latency_per_sample_s",
    "efficiency",
    "peak_memory_bytes",
    "mean_memory_bytes",
    "energy_over_budget_max",
)


def _submit(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


@pytest.mark.deployments("embedded")
def test_the_presets_are_served_and_are_valid_studies(api: Api) -> None:
    served = api.client.get("/api/studies/presets", headers=api.as_("viewer")).json()
    assert {p["name"]: p["description"] != "" for p in served} == {
        "lora-at-the-edge": True,
        "paper-comparison": True,
        "regime-map": True,
        "v-sweep": True,
    }
    sizes = {p["name"]: _submit(api, p["definition"])["progress"]["runs_total"] for p in served}
    assert sizes == {
        "lora-at-the-edge": 2 * 2 * 3 * 2,
        "paper-comparison": 2 * 7 * 5,
        "regime-map": 7 * 3 * 3,
        "v-sweep": 5 * 3,
    }


@pytest.mark.deployments("embedded")
def test_the_paper_comparison_at_the_scenarios_seed_gives_the_figures_of_bench_paper(
    api: Api, tmp_path: Path
) -> None:
    _, body = load_study_file(PRESETS_DIR / "paper-comparison.yaml")
    seeds = {base["name"]: base["config"]["seed"] for base in body["bases"]}
    assert set(seeds.values()) == {1}  # both scenarios' own seed, the one the bench runs
    body["axes"] = [a for a in body["axes"] if a["field"] != "seed"]
    body["axes"] += [{"field": "seed", "values": [1]}, {"field": "training.rounds", "values": [ROUNDS]}]
    study = _submit(api, body)
    assert set(run_here(api, study["id"], tmp_path)) == {"succeeded"}

    detail = api.client.get(f"/api/studies/{study['id']}", headers=api.as_("viewer")).json()
    assert len(detail["cells"]) == len(paper.SCENARIOS) * len(paper.POLICIES)
    for cell in detail["cells"]:
        policy = cell["values"]["scheduler.policy"]
        bench = paper.analytic_task(paper.SCENARIOS[cell["base"]], policy, ROUNDS)["figures"]
        ours = {name: cell["metrics"][name]["mean"] for name in BENCH_FIGURES}
        assert ours == pytest.approx({name: bench[name] for name in BENCH_FIGURES}, rel=1e-9), (
            cell["base"],
            policy,
        )
        assert all(cell["metrics"][name]["n"] == 1 for name in BENCH_FIGURES)


def test_each_preset_says_the_rounds_it_is_meant_for_and_what_fewer_rounds_cannot_show() -> None:
    served = {p.name: p for p in presets()}
    assert {name: p.rounds for name, p in served.items()} == {
        "lora-at-the-edge": 10,  # its training.rounds axis
        "paper-comparison": 100,  # its bases'
        "regime-map": 10,
        "v-sweep": 100,
    }
    for name in ("paper-comparison", "regime-map", "v-sweep"):
        assert len(served[name].fewer_rounds) > 100, name
    assert all(set(p.definition).isdisjoint({"description", "fewer_rounds"}) for p in served.values())
