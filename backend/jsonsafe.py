"""JSON cannot carry NaN or ±inf: such values become null on the way out (and into JSON columns)."""

from __future__ import annotations

import math
from typing import Any


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def sanitize(value: Any) -> Any:
    """A copy of a JSON-like document with every non-finite float replaced by None."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    return value
