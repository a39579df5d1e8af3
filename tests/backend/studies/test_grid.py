"""A study's grid: field paths against the config schema, grid and zip expansion into runs and cells,
configs with the axes' values set, and each cell's baseline cell."""

from __future__ import annotations

from backend.studies.grid import (
    Axis,
    axis_of,
    cell_labels,
    expand,
    field_problem,
    num_runs,
    overlapping,
    overrides,
    reference_cells,
    run_config,
    varying_fields,
)


def test_field_paths_are_checked_against_the_config_schema() -> None:
    for path in (
        "seed",
        "scheduler.V",
        "scheduler.lambda",
        "network.cpu_hz.low",
        "channel.seed",
        "model.hf_config.x",
    ):
        assert field_problem(path) is None, path
    assert "has no field 'VV'" in str(field_problem("scheduler.VV"))
    assert "its fields:" in str(field_problem("nope")) and "scheduler" in str(field_problem("nope"))
    assert "not a section" in str(field_problem("scheduler.V.x"))


def test_grid_crosses_the_axes_and_cells_leave_the_seed_out() -> None:
    axes = [Axis("scheduler.policy", ("a", "b")), Axis("seed", (0, 1)), Axis("scheduler.V", (1, 10))]
    plan = expand(["one", "two"], axes, "grid")
    assert len(plan.runs) == num_runs(2, axes, "grid") == 16
    assert [c.values for c in plan.cells[:2]] == [
        {"scheduler.policy": "a", "scheduler.V": 1},
        {"scheduler.policy": "a", "scheduler.V": 10},
    ]
    assert len(plan.cells) == 8 and {c.base for c in plan.cells[4:]} == {"two"}
    assert [(r.cell, r.values["seed"]) for r in plan.runs[:4]] == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_zip_takes_rows_and_repeated_rows_share_a_cell() -> None:
    axes = [Axis("scheduler.policy", ("a", "a", "b")), Axis("seed", (0, 1, 0))]
    plan = expand(["base"], axes, "zip")
    assert num_runs(1, axes, "zip") == 3
    assert [(r.cell, r.values["seed"]) for r in plan.runs] == [(0, 0), (0, 1), (1, 0)]
    assert expand(["base"], [], "zip").runs[0].values == {}


def test_run_configs_set_dotted_fields_creating_sections() -> None:
    base = {"scheduler": {"policy": "uniform", "V": 1.0}, "model": {"hf_config": None}}
    config = run_config(base, {"scheduler.V": 10, "network.cpu_hz.low": 1e9, "model.hf_config.x": 2})
    assert config["scheduler"] == {"policy": "uniform", "V": 10}
    assert config["network"] == {"cpu_hz": {"low": 1e9}} and config["model"]["hf_config"] == {"x": 2}
    assert base["scheduler"]["V"] == 1.0  # the base is left as it was


def test_overlapping_axes_and_the_axis_a_problem_is_about() -> None:
    assert overlapping(["scheduler", "scheduler.V", "seed", "seed"]) == [
        ("scheduler", "scheduler.V"),
        ("seed", "seed"),
    ]
    fields = ["scheduler.V", "network.cpu_hz"]
    assert axis_of("scheduler.V", fields) == "scheduler.V"
    assert axis_of("network.cpu_hz.low", fields) == "network.cpu_hz"
    assert axis_of("scheduler", fields) == "scheduler.V"
    assert axis_of("training.rounds", fields) is None


def test_each_cell_is_compared_with_the_baseline_cell_of_its_other_values() -> None:
    axes = [Axis("scheduler.policy", ("dssda", "uniform")), Axis("scheduler.V", (1, 10))]
    cells = expand(["t", "b"], axes, "grid").cells
    references = reference_cells(cells, {"scheduler.policy": "uniform"})
    for cell, reference in zip(cells, references, strict=True):
        assert reference is not None
        assert cells[reference].values == {**cell.values, "scheduler.policy": "uniform"}
        assert cells[reference].base == cell.base
    assert set(reference_cells(cells, {"base": "t", "scheduler.policy": "dssda", "scheduler.V": 1})) == {0}
    assert reference_cells(expand(["t"], [Axis("seed", (1,))], "zip").cells, {"scheduler.V": 1}) == [0]


def test_cell_labels_name_the_values_that_tell_cells_apart_and_leave_overrides_out() -> None:
    axes = [
        Axis("scheduler.policy", ("dssda", "uniform")),
        Axis("training.rounds", (5,)),  # an axis of one value: an override of every cell
        Axis("seed", (1, 2)),
    ]
    cells = expand(["transformer"], axes, "grid").cells
    assert varying_fields(cells) == ["scheduler.policy"]
    assert overrides(cells) == {"training.rounds": 5}
    assert cell_labels(cells) == ['policy="dssda"', 'policy="uniform"']
    # several bases name theirs; a value repeated in every row of a zip is an override too
    two = expand(["t", "b"], [Axis("scheduler.V", (1, 10)), Axis("training.rounds", (5, 5))], "zip").cells
    assert cell_labels(two) == ["t, V=1", "t, V=10", "b, V=1", "b, V=10"]
    assert overrides(two) == {"training.rounds": 5}
    # nothing varies but the base, or nothing at all: the base names the cell
    assert cell_labels(expand(["t", "b"], [Axis("training.rounds", (5,))], "grid").cells) == ["t", "b"]
    assert cell_labels(expand(["t"], [Axis("training.rounds", (5,))], "grid").cells) == ["t"]
