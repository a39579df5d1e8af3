"""The wake-up message format: a transaction's events, or empty when they cannot be carried."""

from __future__ import annotations

from backend.live.channel import ROUND, STATUS, LiveEvent
from backend.runtime.redis_wake import MAX_CARRIED_BYTES, decode_events, encode_events


def test_events_round_trip_through_a_wake_up_message() -> None:
    events = [
        LiveEvent("41", 3, STATUS, {"run_id": 3, "status": "running", "error": None}),
        LiveEvent("42", 3, ROUND, {"round": {"round": 0, "latency_s": 1.5}, "devices": []}),
    ]
    assert decode_events(encode_events(events)) == events


def test_what_cannot_be_carried_sends_a_bare_wake_up() -> None:
    too_large = [LiveEvent("1", 1, ROUND, {"padding": "x" * MAX_CARRIED_BYTES})]
    not_json = [LiveEvent("2", 1, ROUND, {"loss": float("nan")})]
    for events in (too_large, not_json, []):
        assert encode_events(events) == b""
    assert decode_events(b"") is None
    assert decode_events(b"1") is None  # a wake-up from an older writer
    assert decode_events(b"{not json") is None
