"""Which axes a study's figures are drawn against, and how: the page and the HTML report both draw
from this answer."""

from __future__ import annotations

from backend.studies.figure_axes import figure_axes
from backend.studies.grid import Axis, expand

POLICIES = ("dssda", "uniform", "proportional", "random", "fl", "split", "myopic")


def _axes(bases: list[str], axes: list[Axis]) -> list[tuple[str, bool, bool]]:
    return [(a.field, a.numeric, a.log) for a in figure_axes(expand(bases, axes, "grid").cells)]


def test_a_v_sweep_is_drawn_against_v_on_a_log_axis_never_against_an_override() -> None:
    axes = [
        Axis("scheduler.policy", ("dssda",)),
        Axis("scheduler.V", (1.0, 10.0, 100.0, 1000.0, 10000.0)),
        Axis("seed", (1, 2, 3)),
        Axis("training.rounds", (5,)),
    ]
    assert _axes(["transformer"], axes) == [("scheduler.V", True, True)]


def test_the_paper_comparison_is_drawn_against_its_policies_with_the_bases_as_the_other_choice() -> None:
    axes = [Axis("scheduler.policy", POLICIES), Axis("seed", (1, 2)), Axis("training.rounds", (5,))]
    assert _axes(["transformer", "bert"], axes) == [
        ("scheduler.policy", False, False),
        ("base", False, False),
    ]


def test_the_last_axis_of_numbers_comes_first_and_a_log_scale_needs_positive_values_over_100x() -> None:
    axes = [
        Axis("scheduler.V", (1, 10)),  # 10×: linear
        Axis("network.memory_bytes", ({"low": 1e8, "high": 2e8}, {"low": 5e8, "high": 1e9})),
        Axis("channel.bandwidth_hz", (0.0, 1e6, 1e8)),  # a zero: no log scale
        Axis("name", ("a", "b")),
        Axis("channel.rayleigh_fading", (True, False)),  # true/false are no numbers
    ]
    assert _axes(["t"], axes) == [
        ("channel.bandwidth_hz", True, False),
        ("scheduler.V", True, False),
        ("network.memory_bytes", False, False),
        ("name", False, False),
        ("channel.rayleigh_fading", False, False),
    ]
    assert _axes(["t"], [Axis("training.rounds", (5,))]) == []
