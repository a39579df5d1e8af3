"""A study's grid, as pure functions: which config fields its axes name, the runs it expands to and
the cells those runs form.

- An axis is a dotted config field path (``scheduler.V``, ``network.cpu_hz.low``, ``seed``) with a
  list of values; its path must name a field of the config schema (``config_json_schema``).
- ``grid`` takes the cartesian product of the axes (the first axis varies slowest), ``zip`` takes
  row i of every axis (all axes as long). The bases (named base configs) are always crossed with
  that, outermost.
- A cell is one combination of base and values of every axis except ``seed``: the runs of a cell
  differ by seed only, and its summary is a mean over them.
- An axis whose value is the same in every cell (``training.rounds: [5]``) is an override: it tells
  no cells apart, so cell labels leave it out.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collapipe_core.config import config_json_schema

SEED = "seed"
BASE = "base"  # the name of the bases as an axis (in a baseline, a figure)


@dataclass(frozen=True)
class Axis:
    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Cell:
    index: int
    base: str
    values: dict[str, Any]  # axis field → value, seed excluded

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "base": self.base, "values": self.values}


@dataclass(frozen=True)
class PlannedRun:
    cell: int
    base: int  # index into the study's bases
    values: dict[str, Any]  # every axis's value for this run (seed included)


@dataclass(frozen=True)
class Plan:
    cells: list[Cell]
    runs: list[PlannedRun]


def _key(value: Any) -> str:
    """A value's identity for grouping (JSON text: 1 and 1.0 are one value, as in the config)."""
    return json.dumps(value, sort_keys=True)


def num_runs(num_bases: int, axes: Sequence[Axis], mode: str) -> int:
    """How many runs the study expands to, without expanding it."""
    if not axes:
        return num_bases
    if mode == "zip":
        return num_bases * len(axes[0].values)
    return num_bases * math.prod(len(a.values) for a in axes)


def expand(base_names: Sequence[str], axes: Sequence[Axis], mode: str) -> Plan:
    """The runs of the study in launch order, and its cells in order of first appearance."""
    if mode == "zip":
        rows: list[tuple[Any, ...]] = list(zip(*(a.values for a in axes), strict=True)) if axes else [()]
    else:
        rows = list(itertools.product(*(a.values for a in axes)))
    cells: dict[tuple[int, str], Cell] = {}
    runs = []
    for base, name in enumerate(base_names):
        for row in rows:
            values = {a.field: v for a, v in zip(axes, row, strict=True)}
            cell_values = {f: v for f, v in values.items() if f != SEED}
            key = (base, _key(cell_values))
            if key not in cells:
                cells[key] = Cell(len(cells), name, cell_values)
            runs.append(PlannedRun(cells[key].index, base, values))
    return Plan(list(cells.values()), runs)


def run_config(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with every dotted field of ``values`` set (missing sections are created)."""
    config = copy.deepcopy(dict(base))
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[leaf] = copy.deepcopy(value)
    return config


# -- field paths against the config schema ------------------------------------------------------


def _section(node: Mapping[str, Any], definitions: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object schema ``node`` stands for (following $ref and a nullable anyOf), or None if it is
    not an object."""
    if "$ref" in node:
        return _section(definitions[str(node["$ref"]).rsplit("/", 1)[-1]], definitions)
    for option in node.get("anyOf", ()):
        found = _section(option, definitions)
        if found is not None:
            return found
    if "properties" in node or node.get("type") == "object":
        return node
    return None


def field_problem(path: str, schema: Mapping[str, Any] | None = None) -> str | None:
    """Why ``path`` names no field of the experiment config (None: it does). Keys under a field that
    takes free keys (e.g. ``model.hf_config``) are accepted as they are."""
    schema = schema if schema is not None else config_json_schema()
    definitions: Mapping[str, Any] = dict(schema).get("$defs") or {}
    node: Mapping[str, Any] | None = schema
    walked: list[str] = []
    for part in path.split("."):
        section = None if node is None else _section(node, definitions)
        where = ".".join(walked) or "the config"
        if section is None:
            return f"{where} is a value, not a section: it has no field {part!r}"
        properties: Mapping[str, Any] = section.get("properties", {})
        if part not in properties:
            if section.get("additionalProperties") not in (None, False) or section.get("patternProperties"):
                return None  # free keys: the config's own check judges them
            known = ", ".join(sorted(properties))
            return f"{where} has no field {part!r}; its fields: {known}"
        node = properties[part]
        walked.append(part)
    return None


def overlapping(fields: Sequence[str]) -> list[tuple[str, str]]:
    """Pairs of axis fields where one is the other or lies inside it (both would set one value)."""
    pairs = []
    for a, b in itertools.combinations(fields, 2):
        if a == b or b.startswith(a + ".") or a.startswith(b + "."):
            pairs.append((a, b))
    return pairs


def axis_of(problem_field: str, fields: Sequence[str]) -> str | None:
    """The axis a config problem's field (``scheduler.V``) is about: the axis that sets it, a value
    inside it, or the section that holds it; None when the problem is not one axis's."""
    for field in fields:
        if (
            problem_field == field
            or problem_field.startswith(field + ".")
            or field.startswith(problem_field + ".")
        ):
            return field
    return None


def reference_cells(cells: Sequence[Cell], baseline: Mapping[str, Any]) -> list[int | None]:
    """Each cell's baseline cell: the cell with the same base and values except where ``baseline``
    says otherwise (``{"scheduler.policy": "uniform"}``: the uniform cell of the same scenario and
    V; ``"base"`` names a base). None where the grid has no such cell (``zip`` rows)."""
    index = {(c.base, _key(c.values)): c.index for c in cells}
    references = []
    for cell in cells:
        values = {field: baseline.get(field, value) for field, value in cell.values.items()}
        references.append(index.get((str(baseline.get(BASE, cell.base)), _key(values))))
    return references


def same_value(a: Any, b: Any) -> bool:
    return _key(a) == _key(b)


def varying_fields(cells: Sequence[Cell]) -> list[str]:
    """The axis fields (seed excluded, in axis order) whose value differs between cells."""
    fields = list(cells[0].values) if cells else []
    return [f for f in fields if len({_key(c.values.get(f)) for c in cells}) > 1]


def overrides(cells: Sequence[Cell]) -> dict[str, Any]:
    """The axis fields set to one value in every cell, with that value."""
    varying = set(varying_fields(cells))
    return {f: v for f, v in (cells[0].values.items() if cells else ()) if f not in varying}


def cell_labels(cells: Sequence[Cell]) -> list[str]:
    """Each cell's label: its base when the study has several (or nothing else tells cells apart), then
    the last part of each varying field with its value's JSON (``policy="dssda", V=10``)."""
    varying = varying_fields(cells)
    several_bases = len({c.base for c in cells}) > 1
    labels = []
    for cell in cells:
        parts = [f"{field.rsplit('.', 1)[-1]}={json.dumps(cell.values[field])}" for field in varying]
        if several_bases or not parts:
            parts.insert(0, cell.base)
        labels.append(", ".join(parts))
    return labels
