"""Quoting a user's value in an error message: a short prefix, never the whole value.

A config or request may carry a megabyte-long string or a deeply nested value; an error that echoes
it whole would copy it into responses and logs. Every message that shows a bad value goes through
:func:`short` (text) or :func:`json_value` (the ``value`` of a JSON error detail).
"""

from __future__ import annotations

import math
from typing import Any

MAX_QUOTED_CHARS = 60


def short(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (with ``…`` and the full length when cut).

    >>> short("x" * 100, 10)
    "'xxxxxxxxx…' (100 characters)"
    """
    if isinstance(value, str) and len(value) > limit:
        head = repr(value[: limit - 1])  # quoted and escaped; put the ellipsis inside the quotes
        return f"{head[:-1]}…{head[-1]} ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_value(value: Any, limit: int = MAX_QUOTED_CHARS) -> str | int | float | bool | None:
    """A JSON-safe stand-in for ``value``: scalars as they are (long strings cut, NaN/±inf as text),
    anything else as a short repr."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**63 else short(value, limit)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    return short(value, limit)
