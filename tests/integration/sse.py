"""A minimal Server-Sent Events client over httpx (what a browser's EventSource does)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class SseEvent:
    id: str
    kind: str
    data: dict[str, Any]


def sse_events(response: httpx.Response) -> Iterator[SseEvent]:
    """Parse an open ``text/event-stream`` response into events (comments and ``retry:`` skipped)."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                yield SseEvent(
                    fields.get("id", ""), fields.get("event", "message"), json.loads(fields["data"])
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
