"""The series cache returns a body only for the watermark it was computed at, and stays bounded."""

from __future__ import annotations

import pytest

from backend.metrics.series_cache import SeriesCache


def test_body_only_at_its_watermark() -> None:
    cache = SeriesCache()
    cache.put(("run", 1), (12, 40), b"twelve rounds")
    assert cache.get(("run", 1), (12, 40)) == b"twelve rounds"
    assert cache.get(("run", 1), (13, 41)) is None  # a round was added since
    assert cache.get(("run", 2), (12, 40)) is None


def test_least_recently_used_entry_is_dropped() -> None:
    cache = SeriesCache(max_entries=2)
    cache.put("a", 1, b"A")
    cache.put("b", 1, b"B")
    assert cache.get("a", 1) == b"A"  # "b" is now the least recently used
    cache.put("c", 1, b"C")
    assert len(cache) == 2
    assert cache.get("b", 1) is None and cache.get("a", 1) == b"A" and cache.get("c", 1) == b"C"


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_entries=0"):
        SeriesCache(max_entries=0)
