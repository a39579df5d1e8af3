"""Per-process cache of round-series response bodies, checked against the stored rounds.

An entry is the JSON body of one ``/api/runs/{id}/rounds`` query, stored with the watermark of the
rounds it was computed from (see ``repository.round_watermark``). A request reads the current
watermark (one index-backed aggregate, much cheaper than reading and downsampling the rounds) and
uses the body only if the watermark is unchanged, so a running run's new rounds are never missed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

DEFAULT_MAX_ENTRIES = 256


class SeriesCache:
    """Least-recently-used bodies keyed by (run id, query parameters); safe across threads."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries={max_entries} must be at least 1; use 256 (the default)")
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[Hashable, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, watermark: Hashable) -> bytes | None:
        """The body stored for ``key`` if it was computed at ``watermark``; else None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != watermark:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: Hashable, watermark: Hashable, body: bytes) -> None:
        with self._lock:
            self._entries[key] = (watermark, body)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
