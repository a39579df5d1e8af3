"""The regime map of a study: per point of two axes, DSSDA's devices and M, its latency against the
best baseline that keeps to the energy budgets and the memory capacities, its memory against fl's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from backend.studies.grid import Cell
from backend.studies.regime import regime_map, value_label
from backend.studies.schemas import RegimeAxes, StudyCreate
from tests.backend.builders import tiny_config
from tests.backend.conftest import Api
from tests.backend.studies.execution import run_here

X, Y = "channel.bandwidth_hz", "network.memory_bytes"
SLOW, FAST = 1.0e6, 8.0e7
SHORT, AMPLE = {"low": 9.0e7, "high": 1.5e8}, {"low": 6.0e8, "high": 1.2e9}


def _run(latency: float, energy: float = 0.5, memory: float = 0.5, **extra: float) -> dict[str, float]:
    figures = {
        "mean_latency_s": latency,
        "energy_over_budget_max": energy,
        "memory_over_capacity_max": memory,
        "peak_memory_bytes": 1.0e8,
        "mean_devices_holding_blocks": 1.0,
        "mean_microbatches": 1.0,
    }
    return {**figures, **extra}


def _map(runs: dict[tuple[str, float, str], list[dict[str, float]]]) -> Any:
    cells, by_cell = [], {}
    for i, ((policy, x, y), figures) in enumerate(runs.items()):
        memory = SHORT if y == "short" else AMPLE
        cells.append(Cell(i, "base", {"scheduler.policy": policy, X: x, Y: memory}))
        by_cell[i] = figures
    axis_values = {
        "scheduler.policy": ["dssda", "split", "uniform", "fl", "myopic"],
        X: [SLOW, FAST],
        Y: [SHORT, AMPLE],
    }
    return regime_map(RegimeAxes(x=X, y=Y), axis_values, cells, by_cell, fixed_batch=True)


def test_the_best_baseline_is_the_fastest_that_keeps_to_the_budgets_and_the_memory() -> None:
    runs = {
        ("dssda", SLOW, "ample"): [
            _run(10.0, mean_devices_holding_blocks=1.0, mean_microbatches=30.0, peak_memory_bytes=2.0e8),
            _run(12.0, mean_devices_holding_blocks=1.5, mean_microbatches=28.0, peak_memory_bytes=4.0e8),
        ],
        # faster, but one seed draws 1.3 x a device's energy budget: not a budget holder
        ("split", SLOW, "ample"): [_run(8.0), _run(9.0, energy=1.3)],
        ("uniform", SLOW, "ample"): [_run(20.0), _run(24.0)],
        # faster still, but its devices' memory does not hold the model
        ("fl", SLOW, "ample"): [_run(5.0, memory=1.4, peak_memory_bytes=6.0e8)] * 2,
    }
    [point] = _map(runs).points
    assert (point.x, point.y, point.panel) == (0, 1, 0)
    assert (point.best_baseline, point.best_baseline_cell, point.best_baseline_latency_s) == (
        "uniform",
        2,
        22.0,
    )
    assert point.latency_ratio == pytest.approx(11.0 / 22.0)
    assert (point.devices_holding_blocks, point.microbatches) == (1.25, 29.0)
    assert point.annotation == "1.2 dev · M 29"
    assert point.memory_ratio_to_fl == pytest.approx(3.0e8 / 6.0e8)
    assert point.dssda_holds is True
    assert {b.policy: b.holds for b in point.baselines} == {"split": False, "uniform": True, "fl": False}
    assert point.summary == (
        "DSSDA 11 s (within budgets and memory), 1.2 dev · M 29; best budget holder uniform (×0.5); "
        "split 8.5 s (does not hold), uniform 22 s, fl 5 s (does not hold); peak memory × fl 0.5"
    )


def test_myopic_is_listed_but_never_the_best_holder() -> None:
    """myopic is DSSDA without its energy queues: where no budget binds it decides as DSSDA does, so a map
    against it would read 1.000 everywhere; the best holder is the fastest of the other baselines."""
    runs = {
        ("dssda", FAST, "ample"): [_run(10.0)],
        ("myopic", FAST, "ample"): [_run(10.0)],
        ("uniform", FAST, "ample"): [_run(16.0)],
        ("split", FAST, "ample"): [_run(20.0)],
    }
    [point] = _map(runs).points
    assert (point.best_baseline, point.latency_ratio) == ("uniform", pytest.approx(10.0 / 16.0))
    assert {b.policy: (b.mean_latency_s, b.holds) for b in point.baselines}["myopic"] == (10.0, True)
    assert "myopic 10 s" in point.summary


def test_points_sit_on_the_axes_in_the_study_s_order_and_a_point_without_a_holder_has_no_ratio() -> None:
    runs = {
        ("dssda", FAST, "short"): [_run(4.0)],
        ("uniform", FAST, "short"): [_run(5.0, energy=2.0)],
        ("dssda", SLOW, "short"): [_run(30.0, energy=1.2)],
        ("uniform", SLOW, "short"): [_run(60.0)],
    }
    found = _map(runs)
    assert (found.x_labels, found.y_labels) == (["1 MHz", "80 MHz"], ["90 MB–150 MB", "600 MB–1.2 GB"])
    assert found.panels == [""] and found.fixed_batch is True
    by_x = {p.x: p for p in found.points}
    assert sorted(by_x) == [0, 1] and all(p.y == 0 for p in found.points)
    assert (by_x[1].best_baseline, by_x[1].latency_ratio) == (None, None)  # uniform over budget
    assert by_x[0].latency_ratio == pytest.approx(0.5)
    assert by_x[0].dssda_holds is False  # reported, not hidden: its own energy is over budget
    assert by_x[0].memory_ratio_to_fl is None  # no fl cell


def test_runs_without_rounds_yet_neither_hold_nor_break_the_budget() -> None:
    runs = {
        ("dssda", SLOW, "short"): [{"mean_latency_s": None}],
        ("uniform", SLOW, "short"): [{"mean_latency_s": None}],
    }
    [point] = _map(runs).points
    assert point.dssda_holds is None and point.latency_ratio is None
    assert point.annotation == "no DSSDA round yet"


def test_value_labels_read_in_the_field_s_unit() -> None:
    assert value_label("channel.bandwidth_hz", 2.0e7) == "20 MHz"
    assert value_label("network.cu_link_rate_bps", 3.0e8) == "300 Mbit/s"
    assert value_label("network.link_latency_s", 0.002) == "0.002 s"
    assert value_label("model.num_blocks", 12) == "12"
    assert value_label("model", {"d_model": 64}) == '{"d_model": 64}'
    assert value_label("scheduler.policy", "<b>x</b>") == "<b>x</b>"  # escaped where it is drawn


def _study(**extra: Any) -> dict[str, Any]:
    return {
        "name": "map",
        "bases": [{"config": {}}],
        "axes": [
            {"field": "scheduler.policy", "values": ["dssda", "uniform"]},
            {"field": X, "values": [SLOW, FAST]},
            {"field": Y, "values": [SHORT, AMPLE]},
            {"field": "seed", "values": [1]},
        ],
        **extra,
    }


@pytest.mark.parametrize(
    ("regime", "axes", "message"),
    [
        ({"x": "channel.noise_density_w_per_hz", "y": Y}, None, "regime_map.x"),
        ({"x": X, "y": "seed"}, None, "regime_map.y"),
        ({"x": X, "y": X}, None, "same axis"),
        (
            {"x": X, "y": Y},
            [{"field": X, "values": [SLOW]}, {"field": Y, "values": [SHORT]}],
            "scheduler.policy",
        ),
        (
            {"x": X, "y": Y},
            [
                {"field": "scheduler.policy", "values": ["uniform", "fl"]},
                {"field": X, "values": [1]},
                {"field": Y, "values": [1]},
            ],
            "listing dssda",
        ),
    ],
)
def test_a_regime_map_names_two_axes_of_the_study_and_a_policy_axis_with_dssda(
    regime: dict[str, str], axes: list[dict[str, Any]] | None, message: str
) -> None:
    body = _study(regime_map=regime) if axes is None else {**_study(regime_map=regime), "axes": axes}
    with pytest.raises(ValidationError, match=message):
        StudyCreate.model_validate(body)
    assert StudyCreate.model_validate(_study(regime_map={"x": X, "y": Y})).regime_map == RegimeAxes(x=X, y=Y)


# -- through the API ---------------------------------------------------------------------------------


def _traces(page: str) -> list[dict[str, Any]]:
    """The traces of every figure of an HTML report (the data argument of each Plotly.newPlot)."""
    decoder, traces = json.JSONDecoder(), []
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, _ = decoder.raw_decode(page, match.end())
        traces += data
    return traces


@pytest.mark.deployments("embedded")
def test_a_study_with_a_regime_map_serves_it_and_draws_it_in_its_report(api: Api, tmp_path: Path) -> None:
    config = tiny_config(training={"rounds": 2, "microbatch_size": None, "batch_size": 8})
    body = {
        "name": "map",
        "bases": [{"config": config}],
        "axes": [
            {"field": "scheduler.policy", "values": ["dssda", "uniform", "fl"]},
            {"field": X, "values": [SLOW, FAST]},
            {"field": Y, "values": [{"low": 1.0e9, "high": 2.0e9}, {"low": 2.0e9, "high": 4.0e9}]},
            {"field": "seed", "values": [0]},
        ],
        "regime_map": {"x": X, "y": Y},
    }
    created = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert created.status_code == 201, created.text
    study_id = created.json()["id"]
    assert set(run_here(api, study_id, tmp_path)) == {"succeeded"}

    detail = api.client.get(f"/api/studies/{study_id}", headers=api.as_("viewer")).json()
    assert detail["definition"]["regime_map"] == {"x": X, "y": Y}
    found = detail["regime_map"]
    assert (found["x_labels"], found["y_labels"]) == (["1 MHz", "80 MHz"], ["1 GB–2 GB", "2 GB–4 GB"])
    assert found["fixed_batch"] is True and "same samples per round" in found["note"]
    cells = {c["index"]: c for c in detail["cells"]}
    assert len(found["points"]) == 4
    for point in found["points"]:
        ours = cells[point["dssda_cell"]]
        assert ours["values"][X] == found["x_values"][point["x"]]
        assert ours["values"][Y] == found["y_values"][point["y"]]
        mean = {name: summary["mean"] for name, summary in ours["metrics"].items()}
        assert point["devices_holding_blocks"] == mean["mean_devices_holding_blocks"]
        assert point["microbatches"] == mean["mean_microbatches"]
        others = [
            c for c in cells.values() if c["index"] != ours["index"] and c["values"][X] == ours["values"][X]
        ]
        others = [c for c in others if c["values"][Y] == ours["values"][Y]]
        assert (
            sorted(b["policy"] for b in point["baselines"])
            == ["fl", "uniform"]
            == sorted(c["values"]["scheduler.policy"] for c in others)
        )
        holders = [
            c
            for c in others
            if c["metrics"]["energy_over_budget_max"]["mean"] <= 1
            and c["metrics"]["memory_over_capacity_max"]["mean"] <= 1
        ]
        best = min(holders, key=lambda c: c["metrics"]["mean_latency_s"]["mean"], default=None)
        if best is None:
            assert point["best_baseline"] is None and point["latency_ratio"] is None
        else:
            assert point["best_baseline_cell"] == best["index"]
            ratio = mean["mean_latency_s"] / best["metrics"]["mean_latency_s"]["mean"]
            assert point["latency_ratio"] == pytest.approx(ratio)
        fl = next(c for c in others if c["values"]["scheduler.policy"] == "fl")
        ratio = mean["peak_memory_bytes"] / fl["metrics"]["peak_memory_bytes"]["mean"]
        assert point["memory_ratio_to_fl"] == pytest.approx(ratio)
    assert any(p["latency_ratio"] is not None for p in found["points"])

    # the HTML report draws the same map: a heatmap of the ratios, each cell annotated
    page = api.client.get(
        f"/api/studies/{study_id}/export", params={"format": "html"}, headers=api.as_("viewer")
    ).text
    assert "<h2>Regime map</h2>" in page
    heatmaps = [t for t in _traces(page) if t["type"] == "heatmap"]
    assert len(heatmaps) == 1
    z = heatmaps[0]["z"]
    expected = [[None, None], [None, None]]
    for point in found["points"]:
        expected[point["y"]][point["x"]] = point["latency_ratio"]
    assert z == expected
    assert [heatmaps[0]["text"][p["y"]][p["x"]] for p in found["points"]] == [
        p["annotation"] for p in found["points"]
    ]
    assert heatmaps[0]["x"] == found["x_labels"] and heatmaps[0]["y"] == found["y_labels"]


@pytest.mark.deployments("embedded")
def test_a_regime_map_on_axes_the_study_does_not_have_is_refused_and_nothing_is_stored(api: Api) -> None:
    body = {**_study(regime_map={"x": X, "y": "network.cpu_hz"}), "bases": [{"config": tiny_config()}]}
    response = api.client.post("/api/studies", json=body, headers=api.as_("operator"))
    assert response.status_code == 422, response.text
    [detail] = response.json()["error"]["details"]
    assert "regime_map.y = 'network.cpu_hz' is not an axis" in detail["message"]
    assert api.client.get("/api/studies", headers=api.as_("viewer")).json()["total"] == 0
