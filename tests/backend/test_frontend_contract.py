"""The dashboard's side of the API: every operation in frontend/js/api-contract.js is served, every
response field listed there is in the operation's OpenAPI schema, every /api/ path written in
frontend/js is listed there, and every field listed is still read somewhere in frontend/js."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from tests.backend.conftest import RecordingDispatcher

FRONTEND_JS = Path(__file__).resolve().parents[2] / "frontend" / "js"
CONTRACT = FRONTEND_JS / "api-contract.js"
Schema = dict[str, Any]


def _contract() -> dict[str, list[str]]:
    text = CONTRACT.read_text(encoding="utf-8")
    start = text.index("export const API_CONTRACT = ") + len("export const API_CONTRACT = ")
    contract: dict[str, list[str]] = json.loads(text[start : text.rindex("}") + 1])
    return contract


def _sources() -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for path in FRONTEND_JS.rglob("*.js") if path != CONTRACT}


def _without_substitutions(source: str) -> str:
    """``source`` with every ``${...}`` of its template literals written ``{}``."""
    parts, i = [], 0
    while (start := source.find("${", i)) >= 0:
        depth, j = 1, start + 2
        while depth and j < len(source):
            depth += {"{": 1, "}": -1}.get(source[j], 0)
            j += 1
        parts.append(source[i:start] + "{}")
        i = j
    return "".join(parts) + source[i:]


def _template(path: str) -> str:
    """A path with its parameters and query left out: /api/runs/{run_id}/devices → /api/runs/{}/devices."""
    return re.sub(r"\{[^}]*\}", "{}", path.split("?")[0])


def frontend_paths() -> set[str]:
    """Every string or template literal of frontend/js that starts with /api/, as a template."""
    literal = re.compile(r"""(['"`])(/api/[^'"`\s]*)\1""")
    found = set()
    for source in _sources().values():
        found |= {_template(m.group(2)) for m in literal.finditer(_without_substitutions(source))}
    return found


def _branches(schema: Schema, components: dict[str, Schema]) -> list[Schema]:
    """The schema's alternatives, references followed and ``null`` left out."""
    if "$ref" in schema:
        return _branches(components[schema["$ref"].rsplit("/", 1)[1]], components)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [b for option in schema[key] for b in _branches(option, components)]
    return [] if schema.get("type") == "null" else [schema]


def _step(schema: Schema, token: str) -> Schema | None:
    if token == "[]":
        return schema.get("items") if schema.get("type") == "array" else None
    if token == "{}":
        values = schema.get("additionalProperties")
        return values if isinstance(values, dict) and values else None
    return schema.get("properties", {}).get(token)


def resolves(schema: Schema, field: str, components: dict[str, Schema]) -> bool:
    """Whether ``field`` ("items[].id", "metrics{}.series{}.round") is declared by ``schema``."""
    tokens = [t for t in re.split(r"\.|(\[\]|\{\})", field) if t]
    current = [schema]
    for token in tokens:
        current = [
            found
            for s in current
            for branch in _branches(s, components)
            if (found := _step(branch, token)) is not None
        ]
        if not current:
            return False
    return True


@pytest.fixture
def openapi(app_factory: Callable[..., FastAPI]) -> dict[str, Any]:
    document: dict[str, Any] = app_factory(RecordingDispatcher()).openapi()
    return document


@pytest.mark.deployments("embedded")  # the OpenAPI document is the same in both
def test_every_operation_and_field_the_dashboard_reads_is_in_the_openapi(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    problems = []
    for operation, fields in _contract().items():
        method, path = operation.split(" ")
        served = openapi["paths"].get(path, {}).get(method.lower())
        if served is None:
            problems.append(f"{operation}: not served")
            continue
        answers = [r for status, r in served["responses"].items() if status.startswith("2")]
        schemas = [
            a["content"]["application/json"]["schema"]
            for a in answers
            if "application/json" in a.get("content", {})
        ]
        problems += [
            f"{operation}: no field {field!r} in its answer"
            for field in fields
            if not any(resolves(schema, field, components) for schema in schemas)
        ]
    assert not problems, "\n".join(problems)


def test_every_api_path_of_the_dashboard_is_in_the_contract() -> None:
    listed = {_template(operation.split(" ")[1]) for operation in _contract()}
    missing = frontend_paths() - listed
    assert not missing, f"frontend/js requests paths api-contract.js does not list: {sorted(missing)}"
    assert "/api/runs/{}/devices" in frontend_paths()  # the scan sees paths built with ${...}


def _leaf(field: str) -> str:
    """The name a field path ends with: items[].owner_name → owner_name."""
    return [part for part in re.split(r"[.\[\]{}]+", field) if part][-1]


def test_every_field_of_the_contract_is_read_by_the_dashboard() -> None:
    code = "\n".join(_sources().values())
    stale = sorted(
        f"{operation}: {field}"
        for operation, fields in _contract().items()
        for field in fields
        if not re.search(rf"\b{re.escape(_leaf(field))}\b", code)
    )
    assert not stale, f"fields api-contract.js lists that frontend/js never names: {stale}"


def test_the_check_fails_when_a_field_is_missing() -> None:
    """``resolves`` follows references, nullable alternatives, arrays and maps — and only declared names."""
    components = {
        "Page": {"properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Item"}}}},
        "Item": {
            "properties": {
                "id": {"type": "integer"},
                "series": {
                    "anyOf": [
                        {"type": "object", "additionalProperties": {"type": "number"}},
                        {"type": "null"},
                    ]
                },
            }
        },
    }
    page = {"$ref": "#/components/schemas/Page"}
    assert resolves(page, "items[].id", components) and resolves(page, "items[].series{}", components)
    assert not resolves(page, "items[].name", components)
    assert not resolves(page, "items{}.id", components)
    assert not resolves({"type": "object", "additionalProperties": True}, "anything", components)
