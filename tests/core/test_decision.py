"""Decisions: the segment plan (the one block → device map) and the JSON shape."""

from __future__ import annotations

import pytest

from collapipe_core.decision import Decision, plan_segments


def test_plan_gives_contiguous_ranges_in_device_order() -> None:
    assert plan_segments([2, 0, 3, 1]) == (range(0, 2), range(2, 2), range(2, 5), range(5, 6))
    assert plan_segments([0, 0, 6, 0]) == (range(0, 0), range(0, 0), range(0, 6), range(6, 6))
    assert plan_segments([]) == ()


@pytest.mark.parametrize(
    ("num_blocks", "message"),
    [
        ([2, -1, 5], r"num_blocks\[1\] = -1 is negative"),
        ([2, 1.5, 3], r"num_blocks\[1\] = 1.5 is not an integer"),
        (["2", 4], r"num_blocks\[0\] = '2' is not an integer"),
        ([True, 5], r"num_blocks\[0\] = True is not an integer"),
    ],
)
def test_plan_refuses_bad_entries(num_blocks: list[object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_segments(num_blocks)  # type: ignore[arg-type]


def test_numpy_style_integers_are_accepted() -> None:
    class Index:  # anything with __index__, as numpy integers have
        def __index__(self) -> int:
            return 3

    assert plan_segments([Index(), Index()]) == (range(0, 3), range(3, 6))  # type: ignore[list-item]


def test_json_round_trip_keeps_every_field() -> None:
    decision = Decision.from_arrays([[2, 0, 2]], [[0.5, 0.0, 0.5]], [[0.1, 0.0, 0.2]], 3, solver_iterations=4)
    assert Decision.from_json(decision.to_json()) == decision


def test_recomputation_is_optional_in_the_json_and_read_back() -> None:
    plain = Decision.from_arrays([[2, 1]], [[0.5, 0.5]], [[0.1, 0.1]], 2)
    assert "recompute" not in str(plain.to_json())  # decisions without it read and write as before
    assert plain.recompute().tolist() == [[False, False]]
    again = Decision.from_arrays([[2, 1]], [[0.5, 0.5]], [[0.1, 0.1]], 2, recompute=[[True, False]])
    assert Decision.from_json(again.to_json()) == again
    assert Decision.from_json(again.to_json()).recompute().tolist() == [[True, False]]
