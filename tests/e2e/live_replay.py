"""A finished run replayed to a page as if it were running: the run view's own requests, answered
from the server's stored run, a few rounds at a time when the test says so.

``LiveReplay.open(page, run_id, from_round)`` routes the page's requests of the run:

- ``GET /api/runs/{id}`` (the detail the view loads with, and reads again on a status change): the
  server's answer as it was when the rounds released so far were stored — status ``running``,
  ``rounds_done`` and ``last_event_id`` of those rounds — and the server's own answer once every
  event was released;
- ``GET /api/runs/{id}/events``: the run's stored events (recorded once from the server's stream)
  after the id the page asks from (``after``, or the last one it was sent: the interception does not
  show EventSource's ``Last-Event-ID``), up to what ``release(round)`` let out; the request waits
  until then. The answer ends there and says ``retry: 50``, so the page's EventSource asks again at
  once, and waits for the next release. After the last event: 204, a finished run's answer. One
  page, not reloaded, reads a replay.

Every other request (the history up to ``from_round - 1``, the timeline, the tiles' figures) goes to
the server: a finished run's stored rounds are those a running run had stored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from playwright.sync_api import Page, Route

from tests.e2e.server import Server


@dataclass(frozen=True)
class StoredEvent:
    id: int
    kind: str
    data: dict[str, Any]

    def sse(self) -> str:
        return f"id: {self.id}\nevent: {self.kind}\ndata: {json.dumps(self.data)}\n\n"


def stored_events(server: Server, run_id: int) -> list[StoredEvent]:
    """Every event of a finished run's stream, in order (the stream ends after its terminal status)."""
    with server.client() as client, client.stream("GET", f"/api/runs/{run_id}/events") as response:
        response.raise_for_status()
        text = "".join(response.iter_text())
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        if "id" in fields and "event" in fields:
            events.append(StoredEvent(int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


class LiveReplay:
    def __init__(self, server: Server, run_id: int, events: list[StoredEvent], start_after: int) -> None:
        self.server = server
        self.run_id = run_id
        self.events = events
        self.released = start_after  # the id of the last event the page may have
        self.sent = start_after  # the id of the last event the page was sent
        self.waiting: list[tuple[Route, int]] = []  # event requests held, with the id they ask after

    @classmethod
    def open(cls, page: Page, server: Server, run_id: int, from_round: int) -> LiveReplay:
        """Route the page's requests of finished run ``run_id`` as if it had stored rounds
        0 … ``from_round - 1`` (the stream brings the others on ``release``); the page is not loaded."""
        events = stored_events(server, run_id)
        first = next(e for e in events if e.kind == "round" and e.data["round"]["round"] >= from_round)
        replay = cls(server, run_id, events, max(e.id for e in events if e.id < first.id))
        page.route(re.compile(rf"/api/runs/{run_id}$"), replay._detail)
        page.route(re.compile(rf"/api/runs/{run_id}/events(\?.*)?$"), replay._events)
        return replay

    @property
    def finished(self) -> bool:
        return self.released >= self.events[-1].id

    def release(self, round_index: int | None = None) -> None:
        """Let the page have the events up to round ``round_index``'s (None: to the end, the run's
        terminal status included); answers the event request waiting, if any."""
        rounds = [e for e in self.events if e.kind == "round"]
        later = [e.id for e in rounds if round_index is not None and e.data["round"]["round"] > round_index]
        # the events before the first round not let out (the run's end after the last round)
        self.released = max(e.id for e in self.events if not later or e.id < min(later))
        waiting, self.waiting = self.waiting, []
        for route, after in waiting:
            self._answer(route, after)

    def _detail(self, route: Route) -> None:
        response = route.fetch()
        detail = response.json()
        if not self.finished:
            shown = [e for e in self.events if e.id <= self.released]
            rounds = [e for e in shown if e.kind == "round"]
            detail.update(
                status="running",
                rounds_done=len(rounds),
                last_event_id=str(self.released),
                cancel_requested=False,
                error=None,
            )
        route.fulfill(response=response, json=detail)

    def _events(self, route: Route) -> None:
        query = re.search(r"[?&]after=(\d+)", route.request.url)
        after = max(int(query.group(1)) if query else 0, self.sent)
        if after >= self.released and not self.finished:
            self.waiting.append((route, after))  # answered by the next release
            return
        self._answer(route, after)

    def _answer(self, route: Route, after: int) -> None:
        batch = [e for e in self.events if after < e.id <= self.released]
        if not batch:
            route.fulfill(status=204)
            return
        self.sent = batch[-1].id
        body = "retry: 50\n\n" + "".join(e.sse() for e in batch)
        route.fulfill(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}, body=body
        )
