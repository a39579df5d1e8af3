"""Text that can be stored: PostgreSQL rejects NUL characters, so inputs containing one are refused."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\x00) characters")
    return value


StoredStr = Annotated[str, AfterValidator(_no_nul)]


def nul_paths(value: Any, path: str = "") -> list[str]:
    """Dotted paths of every string (key or value) in a JSON document that contains a NUL."""
    found: list[str] = []
    if isinstance(value, str):
        if "\x00" in value:
            found.append(path or "(root)")
    elif isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                found.append(child)
            found.extend(nul_paths(item, child))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(nul_paths(item, f"{path}.{i}" if path else str(i)))
    return found
