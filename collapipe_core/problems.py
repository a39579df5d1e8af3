"""A config's problems: each names the field (a dotted path), the value and what to change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collapipe_core.quote import json_value, short


@dataclass(frozen=True)
class ConfigProblem:
    field: str  # dotted path, e.g. "channel.bandwidth_hz"
    value: Any
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} (got {short(self.value)})"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON; the value is quoted by at most a short prefix."""
        return {"field": self.field, "value": json_value(self.value), "message": self.message}


class ConfigError(ValueError):
    """A config that cannot run; ``problems`` lists each one."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in problems))


def translated(error: Any, prefix: str = "") -> ConfigProblem:
    """A pydantic error (of a section when ``prefix`` names it) as a problem whose message says what to do."""
    field = ".".join([prefix] * bool(prefix) + [str(p) for p in error["loc"]]) or "(root)"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if isinstance(value, str) and not value.strip() and error["type"] in ("float_type", "int_type"):
        message = "is empty; give a number, or leave the field out for its default"
    elif error["type"] == "extra_forbidden":
        message = "unknown field; remove it or check its spelling against `collapipe config schema`"
    elif error["type"] in ("float_type", "int_type") and isinstance(value, str):
        message += (
            "; numbers are never text (PyYAML reads 4.0e9 as text: write 4.0e+9, or the plain digits "
            "of an integer)"
        )
    elif error["type"] == "int_type" and isinstance(value, float):
        message += f" (a whole number, not {short(value)})"
    return ConfigProblem(field, value, message)
