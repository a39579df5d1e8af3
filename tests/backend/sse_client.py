"""Read Server-Sent Events from a real server: (id, event, data) tuples."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

Event = tuple[str, str, dict[str, Any]]


def iter_events(response: httpx.Response) -> Iterator[Event]:
    event_id, kind, data = "", "message", ""
    for line in response.iter_lines():
        if line == "":
            if data:
                yield event_id, kind, json.loads(data)
            kind, data = "message", ""
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data += line[6:]


def read_stream(
    url: str,
    headers: dict[str, str],
    last_event_id: str | None = None,
    limit: int | None = None,
    timeout_s: float = 120.0,
) -> list[Event]:
    """Every event until the server ends the stream (or ``limit`` events were read)."""
    if last_event_id is not None:
        headers = {**headers, "Last-Event-ID": last_event_id}
    events: list[Event] = []
    with httpx.stream("GET", url, headers=headers, timeout=timeout_s) as response:
        if response.status_code == 204:
            return events
        response.raise_for_status()
        for event in iter_events(response):
            events.append(event)
            if limit is not None and len(events) >= limit:
                break
    return events
