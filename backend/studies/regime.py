"""A study's regime map: at every point of two axes (say the D2D link rate × the devices' memory), what
DSSDA decided and how it fares against the best baseline that keeps to the constraints.

A study with a ``regime_map`` (``{"x": <axis>, "y": <axis>}``) and a ``scheduler.policy`` axis holding
``dssda`` and baselines. Its cells are grouped by panel (the base and the values of every other axis
but the policy and the seed), then by point (x value, y value). Per point, each figure the mean over
the cell's runs (its seeds):

- DSSDA's devices holding blocks per cluster (``mean_devices_holding_blocks``), its M
  (``mean_microbatches``) and its mean round latency;
- the best budget holder: among the baselines whose every run keeps the devices' time-average energy
  within their budgets (``energy_over_budget_max`` ≤ 1) and every device's modeled memory within its
  capacity (``memory_over_capacity_max`` ≤ 1), the one with the least mean round latency. ``myopic`` is
  no candidate: it is DSSDA's own objective with the energy queues at zero, an ablation of DSSDA rather
  than another scheduler (wherever no budget binds it decides as DSSDA does, and a map against it
  reads 1.000 everywhere); it stays in ``baselines`` with its latency and whether it holds;
- ``latency_ratio``: DSSDA's mean latency over the best holder's. With a fixed batch
  (``training.batch_size``) every policy trains the same samples per round, so the ratio of the time
  to a target loss is the ratio of cumulative latency over the same rounds: this ratio;
- ``memory_ratio_to_fl``: DSSDA's peak device memory over ``fl``'s (whole encoder per device).

Pure functions over the runs' figures (``backend.studies.figures``); the summary, the HTML report and
``bench/regime_map.py`` all read the map this module builds.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from backend.studies.grid import Cell, same_value
from backend.studies.schemas import RegimeAxes, RegimeBaseline, RegimeMap, RegimePoint

POLICY_AXIS = "scheduler.policy"
OURS = "dssda"
MEMORY_REFERENCE = "fl"
ABLATIONS = frozenset({"myopic"})  # DSSDA's variants: listed beside the baselines, never the best holder
Figures = Mapping[str, float | None]

REGIME_NOTE = (
    "Regime map: at every point of {x} × {y}, DSSDA's mean round latency over the best budget holder's "
    "(the baseline with the least mean latency among those whose devices' time-average energy stays "
    "within budget and whose modeled memory fits in every run; myopic, DSSDA without its energy queues, "
    "is listed but no candidate); below 1 DSSDA is faster. Each point "
    "reads DSSDA's devices holding blocks per cluster and its M (means over rounds and seeds). {batch}"
)
FIXED_BATCH = (
    "Every run trains a fixed batch, so every policy trains the same samples per round: the ratio of "
    "the times to a target loss is the ratio of cumulative latency over the same rounds, this ratio."
)
NOT_FIXED_BATCH = (
    "Not every run trains a fixed batch (training.batch_size): policies train different samples per "
    "round, so this latency ratio is not a ratio of times to a target loss."
)


def note(axes: RegimeAxes, fixed_batch: bool) -> str:
    """How to read the map, in a paragraph (the study page and the HTML report show it)."""
    return REGIME_NOTE.format(x=axes.x, y=axes.y, batch=FIXED_BATCH if fixed_batch else NOT_FIXED_BATCH)


_UNITS = (
    ("_bps", "bit/s"),
    ("_hz", "Hz"),
    ("_bytes", "B"),
    ("_w", "W"),
    ("_j", "J"),
    ("_m", "m"),
    ("_s", "s"),
)
_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _number(value: float, unit: str) -> str:
    if unit:
        for scale, prefix in _PREFIXES:
            if abs(value) >= scale:
                return f"{value / scale:.3g} {prefix}{unit}"
        return f"{value:.3g} {unit}"
    return f"{value:.4g}"


def value_label(field: str, value: Any) -> str:
    """An axis value as a reader wants it: ``20 MHz`` for channel.bandwidth_hz = 2e7, ``150 MB–300 MB``
    for a {low, high} range of network.memory_bytes; JSON text for anything else."""
    leaf = field.rsplit(".", 1)[-1]
    unit = next((name for suffix, name in _UNITS if leaf.endswith(suffix)), "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(float(value), unit)
    if isinstance(value, dict) and set(value) == {"low", "high"}:
        low, high = value["low"], value["high"]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
            return f"{_number(float(low), unit)}–{_number(float(high), unit)}"
    return value if isinstance(value, str) else json.dumps(value)


def _mean(runs: Sequence[Figures], name: str) -> float | None:
    values = [v for run in runs if (v := run.get(name)) is not None]
    return statistics.fmean(values) if values else None


def holds(runs: Sequence[Figures]) -> bool | None:
    """Whether every run of a cell keeps to the energy budgets and the memory capacities (None: no run
    has figures yet)."""
    measured = [
        run
        for run in runs
        if run.get("energy_over_budget_max") is not None and run.get("memory_over_capacity_max") is not None
    ]
    if not measured:
        return None
    return len(measured) == len(runs) and all(
        (run["energy_over_budget_max"] or 0.0) <= 1.0 and (run["memory_over_capacity_max"] or 0.0) <= 1.0
        for run in measured
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _index(values: Sequence[Any], value: Any) -> int | None:
    return next((i for i, v in enumerate(values) if same_value(v, value)), None)


def _panel(cell: Cell, axes: RegimeAxes, several_bases: bool, varying: set[str]) -> str:
    skip = {axes.x, axes.y, POLICY_AXIS}
    parts = [
        f"{f.rsplit('.', 1)[-1]}={value_label(f, v)}"
        for f, v in cell.values.items()
        if f not in skip and f in varying
    ]
    return ", ".join([cell.base] * several_bases + parts)


def point(
    x: int, y: int, panel: int, cells: Sequence[Cell], runs: Mapping[int, Sequence[Figures]]
) -> RegimePoint:
    """One point of the map from its cells (one per policy) and their runs' figures."""
    by_policy = {str(c.values.get(POLICY_AXIS)): c for c in cells}
    ours = by_policy.get(OURS)
    our_runs = runs.get(ours.index, []) if ours is not None else []
    baselines = [
        RegimeBaseline(
            policy=policy,
            cell=cell.index,
            mean_latency_s=_mean(runs.get(cell.index, []), "mean_latency_s"),
            holds=holds(runs.get(cell.index, [])),
        )
        for policy, cell in by_policy.items()
        if policy != OURS
    ]
    holders = [b for b in baselines if b.holds and b.mean_latency_s is not None and b.policy not in ABLATIONS]
    best = min(holders, key=lambda b: b.mean_latency_s or 0.0) if holders else None
    latency = _mean(our_runs, "mean_latency_s")
    devices, microbatches = (
        _mean(our_runs, "mean_devices_holding_blocks"),
        _mean(our_runs, "mean_microbatches"),
    )
    reference = by_policy.get(MEMORY_REFERENCE)
    reference_peak = _mean(runs.get(reference.index, []), "peak_memory_bytes") if reference else None
    found = RegimePoint(
        panel=panel,
        x=x,
        y=y,
        dssda_cell=ours.index if ours is not None else None,
        devices_holding_blocks=devices,
        microbatches=microbatches,
        annotation=annotation(devices, microbatches),
        dssda_latency_s=latency,
        dssda_holds=holds(our_runs),
        best_baseline=best.policy if best else None,
        best_baseline_cell=best.cell if best else None,
        best_baseline_latency_s=best.mean_latency_s if best else None,
        latency_ratio=_ratio(latency, best.mean_latency_s if best else None),
        memory_ratio_to_fl=_ratio(_mean(our_runs, "peak_memory_bytes"), reference_peak),
        baselines=baselines,
        summary="",
    )
    found.summary = summary(found)
    return found


def regime_map(
    axes: RegimeAxes,
    axis_values: Mapping[str, Sequence[Any]],
    cells: Sequence[Cell],
    runs: Mapping[int, Sequence[Figures]],
    fixed_batch: bool,
) -> RegimeMap:
    """The map of a study: ``axis_values`` are the study's axes' values in their order (the map's rows
    and columns keep it), ``runs`` each cell's runs' figures."""
    x_values, y_values = list(axis_values[axes.x]), list(axis_values[axes.y])
    several_bases = len({c.base for c in cells}) > 1
    varying = {f for f, values in axis_values.items() if len(values) > 1}
    panels: list[str] = []
    groups: dict[tuple[int, int, int], list[Cell]] = {}
    for cell in cells:
        x, y = _index(x_values, cell.values.get(axes.x)), _index(y_values, cell.values.get(axes.y))
        if x is None or y is None:
            continue
        name = _panel(cell, axes, several_bases, varying)
        if name not in panels:
            panels.append(name)
        groups.setdefault((panels.index(name), y, x), []).append(cell)
    return RegimeMap(
        x_field=axes.x,
        y_field=axes.y,
        x_values=x_values,
        x_labels=[value_label(axes.x, v) for v in x_values],
        y_values=y_values,
        y_labels=[value_label(axes.y, v) for v in y_values],
        panels=panels,
        fixed_batch=fixed_batch,
        note=note(axes, fixed_batch),
        points=[point(x, y, panel, members, runs) for (panel, y, x), members in sorted(groups.items())],
    )


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g} s"


def summary(p: RegimePoint) -> str:
    """The point in a sentence (the maps' hover text): DSSDA's latency against every baseline's."""
    held = {True: "within budgets and memory", False: "over a budget or a capacity", None: "no round yet"}
    best = (
        f"best budget holder {p.best_baseline} (×{p.latency_ratio:.3g})"
        if p.best_baseline is not None and p.latency_ratio is not None
        else "no baseline holds the budgets and the memory"
    )
    others = ", ".join(
        f"{b.policy} {_seconds(b.mean_latency_s)}" + ("" if b.holds else " (does not hold)")
        for b in p.baselines
    )
    memory = "—" if p.memory_ratio_to_fl is None else f"{p.memory_ratio_to_fl:.3g}"
    return (
        f"DSSDA {_seconds(p.dssda_latency_s)} ({held[p.dssda_holds]}), {p.annotation}; {best}; {others}; "
        f"peak memory × fl {memory}"
    )


def annotation(devices: float | None, microbatches: float | None) -> str:
    """What a point says besides its colour: DSSDA's devices holding blocks per cluster and its M."""
    if devices is None or microbatches is None:
        return "no DSSDA round yet"
    return f"{devices:.2g} dev · M {microbatches:.3g}"
