"""Where a run's records go. The service implements the same interface over SQL and Redis.

A sink receives each finished round exactly once, in order, after the round's checkpoint is written
(so a crash never loses a round that was reported, and a resumed run re-reports nothing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from collapipe_core.records import RoundResult


class RecordSink(Protocol):
    def write_round(self, result: RoundResult) -> None: ...

    def close(self) -> None: ...


class MemorySink:
    """Keeps every round in a list (tests, notebooks, the embedded service)."""

    def __init__(self) -> None:
        self.results: list[RoundResult] = []

    def write_round(self, result: RoundResult) -> None:
        self.results.append(result)

    def close(self) -> None:
        pass


class JsonLinesSink:
    """Appends one JSON object per round to a file (``{"round": {...}, "devices": [...]}``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write_round(self, result: RoundResult) -> None:
        self._file.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class FanOutSink:
    """Sends every round to several sinks in order."""

    def __init__(self, *sinks: RecordSink) -> None:
        self.sinks = sinks

    def write_round(self, result: RoundResult) -> None:
        for sink in self.sinks:
            sink.write_round(result)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_json_lines(path: str | Path) -> list[RoundResult]:
    """Read back a JSON-lines record file."""
    results: list[RoundResult] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            data: dict[str, Any] = json.loads(line)
            results.append(RoundResult.from_json(data))
    return results
