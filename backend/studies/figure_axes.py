"""The axes a study's figures are drawn against, as a pure function of its cells: the study page and
the HTML report draw from this one answer.

- Only an axis whose value differs between cells is one (an override, ``training.rounds: [5]``, is
  not), and ``base`` when the study has several bases.
- An axis of numbers (``scheduler.V``) is drawn as a line per group of cells with its 95 % interval as
  a band, on a log scale when its values are positive and span 100× or more; any other axis (policies,
  bases, memory ranges, true/false) as a bar per value with 95 % whiskers.
- The first is the one drawn at first: the last axis of numbers, else the last axis of the study, else
  ``base``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backend.studies import grid
from backend.studies.grid import BASE, Cell
from backend.studies.schemas import FigureAxis

LOG_SPAN = 100.0  # values spanning this ratio or more are drawn on a log scale


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _axis(field: str, values: Sequence[Any]) -> FigureAxis:
    numeric = all(_is_number(v) for v in values)
    log = numeric and min(values) > 0 and max(values) / min(values) >= LOG_SPAN
    return FigureAxis(field=field, numeric=numeric, log=log)


def figure_axes(cells: Sequence[Cell]) -> list[FigureAxis]:
    """The axes a figure of the study can be drawn against, the one drawn at first first."""
    axes = [_axis(field, [c.values[field] for c in cells]) for field in grid.varying_fields(cells)]
    if len({c.base for c in cells}) > 1:
        axes.append(FigureAxis(field=BASE, numeric=False, log=False))
    numbers = [a for a in axes if a.numeric]
    others = [a for a in axes if a.field != BASE]
    first = numbers[-1] if numbers else others[-1] if others else axes[-1] if axes else None
    return [] if first is None else [first, *(a for a in axes if a is not first)]
