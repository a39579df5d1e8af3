"""Tests of the pipeline timeline: closed form, hand-worked cases, schedule properties, invariants."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pytest

from collapipe_core.costmodel.timeline import (
    Schedule,
    Stage,
    Timeline,
    TimelineEvent,
    compute_order,
    in_flight,
    in_flight_1f1b,
    simulate,
)


def gpipe_makespan(stages: list[Stage], num_microbatches: int) -> float:
    """GPipe's closed form over every stage of the chain (the independent reference of the simulation):
    Σ_i F_i + (M−1)·max_i F_i + Σ_i B_i + (M−1)·max_i B_i."""
    forward = [s.forward_s for s in stages]
    backward = [s.backward_s for s in stages]
    extra = num_microbatches - 1
    return math.fsum(forward) + extra * max(forward) + math.fsum(backward) + extra * max(backward)


REL = 1e-9


def chain(
    forward_c: Sequence[float],
    backward_c: Sequence[float],
    forward_l: Sequence[float] | None = None,
    backward_l: Sequence[float] | None = None,
) -> list[Stage]:
    """Compute stages s0..s{C-1} joined by links l1..l{C-1} (zero-time links when none are given)."""
    num = len(forward_c)
    forward_l = [0.0] * (num - 1) if forward_l is None else forward_l
    backward_l = [0.0] * (num - 1) if backward_l is None else backward_l
    stages: list[Stage] = []
    for i in range(num):
        if i:
            stages.append(Stage(f"l{i}", "link", float(forward_l[i - 1]), float(backward_l[i - 1])))
        stages.append(Stage(f"s{i}", "compute", float(forward_c[i]), float(backward_c[i])))
    return stages


def times(rng: np.random.Generator, size: int) -> list[float]:
    """Uniform times in [0, 1) with about one in five set exactly to zero."""
    drawn: list[float] = (rng.uniform(0.0, 1.0, size) * (rng.uniform(size=size) > 0.2)).tolist()
    return drawn


def folded(stages: Sequence[Stage]) -> list[Stage]:
    """The chain with every transfer folded into the compute stage that consumes it.

    Activation link into the downstream stage's forward, gradient link into the upstream stage's
    backward; the links that remain take no time.
    """
    compute, links = stages[::2], stages[1::2]
    forward = [s.forward_s + (links[i - 1].forward_s if i else 0.0) for i, s in enumerate(compute)]
    backward = [
        s.backward_s + (links[i].backward_s if i < len(links) else 0.0) for i, s in enumerate(compute)
    ]
    return chain(forward, backward)


def check_timeline(stages: Sequence[Stage], num_mb: int, schedule: Schedule, timeline: Timeline) -> None:
    """Every invariant of the documented model, checked from the events alone."""
    events = timeline.events
    assert list(events) == sorted(events, key=lambda e: (e.start_s, e.participant))
    assert all(e.end_s >= e.start_s >= 0 for e in events)
    assert timeline.makespan_s == max(e.end_s for e in events)
    compute, links = stages[::2], stages[1::2]
    num_c = len(compute)

    # Indexes: compute ops by (participant, kind, mb); transfers by (src, dst, mb) from send events.
    ops: dict[tuple[str, str, int], TimelineEvent] = {}
    per_stage: dict[str, list[TimelineEvent]] = defaultdict(list)
    sends: dict[tuple[str, str, int], TimelineEvent] = {}
    receives: dict[tuple[str, str, int], TimelineEvent] = {}
    per_direction: dict[tuple[str, str], list[TimelineEvent]] = defaultdict(list)
    for e in events:
        if e.kind in ("forward", "backward"):
            assert (e.participant, e.kind, e.microbatch) not in ops
            ops[e.participant, e.kind, e.microbatch] = e
            per_stage[e.participant].append(e)
        elif e.kind == "send":
            assert (e.participant, e.peer, e.microbatch) not in sends
            sends[e.participant, e.peer, e.microbatch] = e
            per_direction[e.participant, e.peer].append(e)
        else:
            receives[e.peer, e.participant, e.microbatch] = e

    # Counts and pairing: M forwards and M backwards per compute stage; each send has its receive.
    assert len(ops) == 2 * num_c * num_mb
    assert len(sends) == len(receives) == 2 * len(links) * num_mb
    for key, send in sends.items():
        receive = receives[key]
        assert (receive.start_s, receive.end_s) == (send.start_s, send.end_s)

    # Per-stage order is the schedule's; exclusivity and tightness on every resource.
    def tight(event: TimelineEvent, ready: list[float], duration: float) -> None:
        assert math.isclose(event.start_s, max(ready, default=0.0), rel_tol=REL, abs_tol=1e-12)
        assert math.isclose(event.end_s - event.start_s, duration, rel_tol=REL, abs_tol=1e-12)

    for i, s in enumerate(compute):
        seq = per_stage[s.name]
        assert [(e.kind, e.microbatch) for e in seq] == list(compute_order(schedule, num_c, i, num_mb))
        for prev, e in zip([None, *seq[:-1]], seq, strict=True):
            ready = [prev.end_s] if prev else []
            if e.kind == "forward":
                if i:
                    ready.append(sends[compute[i - 1].name, s.name, e.microbatch].end_s)
                tight(e, ready, s.forward_s)
            else:
                ready.append(ops[s.name, "forward", e.microbatch].end_s)
                if i < num_c - 1:
                    ready.append(sends[compute[i + 1].name, s.name, e.microbatch].end_s)
                tight(e, ready, s.backward_s)
    for li, link in enumerate(links):
        up, down = compute[li].name, compute[li + 1].name
        for src, dst, needs, duration in (
            (up, down, (up, "forward"), link.forward_s),
            (down, up, (down, "backward"), link.backward_s),
        ):
            seq = per_direction[src, dst]
            assert [e.microbatch for e in seq] == list(range(num_mb))  # FIFO
            for prev, e in zip([None, *seq[:-1]], seq, strict=True):
                ready = [ops[needs[0], needs[1], e.microbatch].end_s] + ([prev.end_s] if prev else [])
                tight(e, ready, duration)

    # Summaries.
    for i, s in enumerate(compute):
        assert math.isclose(timeline.busy_s[s.name], num_mb * (s.forward_s + s.backward_s), rel_tol=REL)
        level = peak = 0
        for e in per_stage[s.name]:
            level += 1 if e.kind == "forward" else -1
            peak = max(peak, level)
        assert timeline.peak_in_flight[s.name] == peak == in_flight(schedule, num_c, i, num_mb)


# ---------------------------------------------------------------- hand-worked cases


def test_one_stage_by_hand() -> None:
    stages = [Stage("cu", "compute", 1.5, 2.5)]
    gpipe = simulate(stages, 3, "gpipe")
    assert [(e.kind, e.microbatch, e.start_s, e.end_s) for e in gpipe.events] == [
        ("forward", 0, 0.0, 1.5),
        ("forward", 1, 1.5, 3.0),
        ("forward", 2, 3.0, 4.5),
        ("backward", 0, 4.5, 7.0),
        ("backward", 1, 7.0, 9.5),
        ("backward", 2, 9.5, 12.0),
    ]
    one_f_one_b = simulate(stages, 3, "1f1b")
    assert [(e.kind, e.microbatch, e.start_s, e.end_s) for e in one_f_one_b.events] == [
        ("forward", 0, 0.0, 1.5),
        ("backward", 0, 1.5, 4.0),
        ("forward", 1, 4.0, 5.5),
        ("backward", 1, 5.5, 8.0),
        ("forward", 2, 8.0, 9.5),
        ("backward", 2, 9.5, 12.0),
    ]
    assert gpipe.makespan_s == one_f_one_b.makespan_s == gpipe_makespan(stages, 3) == 12.0
    assert gpipe.peak_in_flight == {"cu": 3} and one_f_one_b.peak_in_flight == {"cu": 1}
    assert gpipe.busy_s == one_f_one_b.busy_s == {"cu": 12.0}


TWO_STAGES = [
    Stage("a", "compute", 1.0, 2.0),
    Stage("ab", "link", 0.5, 0.25, sender="a", receiver="b"),
    Stage("b", "compute", 2.0, 3.0),
]


def test_two_stages_gpipe_by_hand() -> None:
    # a:  F0 [0,1]  F1 [1,2]                     B0 [8.75,10.75]  B1 [11.75,13.75]
    # ab: act 0 [1,1.5]  act 1 [2,2.5]           grad 0 [8.5,8.75]  grad 1 [11.5,11.75]
    # b:  F0 [1.5,3.5]  F1 [3.5,5.5]  B0 [5.5,8.5]  B1 [8.5,11.5]
    # closed form: ΣF + (M−1)·maxF + ΣB + (M−1)·maxB = 3.5 + 2 + 5.25 + 3 = 13.75
    timeline = simulate(TWO_STAGES, 2, "gpipe")
    assert {(e.participant, e.kind, e.microbatch, e.start_s, e.end_s, e.peer) for e in timeline.events} == {
        ("a", "forward", 0, 0.0, 1.0, ""),
        ("a", "forward", 1, 1.0, 2.0, ""),
        ("a", "send", 0, 1.0, 1.5, "b"),
        ("b", "receive", 0, 1.0, 1.5, "a"),
        ("a", "send", 1, 2.0, 2.5, "b"),
        ("b", "receive", 1, 2.0, 2.5, "a"),
        ("b", "forward", 0, 1.5, 3.5, ""),
        ("b", "forward", 1, 3.5, 5.5, ""),
        ("b", "backward", 0, 5.5, 8.5, ""),
        ("b", "backward", 1, 8.5, 11.5, ""),
        ("b", "send", 0, 8.5, 8.75, "a"),
        ("a", "receive", 0, 8.5, 8.75, "b"),
        ("b", "send", 1, 11.5, 11.75, "a"),
        ("a", "receive", 1, 11.5, 11.75, "b"),
        ("a", "backward", 0, 8.75, 10.75, ""),
        ("a", "backward", 1, 11.75, 13.75, ""),
    }
    assert timeline.makespan_s == gpipe_makespan(TWO_STAGES, 2) == 13.75
    assert timeline.peak_in_flight == {"a": 2, "b": 2}
    assert timeline.busy_s == {"a": 6.0, "b": 10.0}


def test_two_stages_1f1b_by_hand() -> None:
    # a (warm-up 1): F0 [0,1]  F1 [1,2]  B0 [6.75,8.75]  B1 [11.75,13.75]
    # b (warm-up 0): F0 [1.5,3.5]  B0 [3.5,6.5]  F1 [6.5,8.5]  B1 [8.5,11.5]
    # grads: 0 [6.5,6.75], 1 [11.5,11.75]
    timeline = simulate(TWO_STAGES, 2, "1f1b")
    computed = [(e.participant, e.kind, e.microbatch, e.start_s, e.end_s) for e in timeline.events]
    assert [c for c in computed if c[1] in ("forward", "backward")] == [
        ("a", "forward", 0, 0.0, 1.0),
        ("a", "forward", 1, 1.0, 2.0),
        ("b", "forward", 0, 1.5, 3.5),
        ("b", "backward", 0, 3.5, 6.5),
        ("b", "forward", 1, 6.5, 8.5),
        ("a", "backward", 0, 6.75, 8.75),
        ("b", "backward", 1, 8.5, 11.5),
        ("a", "backward", 1, 11.75, 13.75),
    ]
    assert ("a", "receive", 0, 6.5, 6.75) in computed and ("b", "send", 1, 11.5, 11.75) in computed
    assert timeline.makespan_s == 13.75
    assert timeline.peak_in_flight == {"a": 2, "b": 1}


def test_1f1b_beats_gpipe_on_a_slow_first_stage_by_hand() -> None:
    # a: F=10, B=20; b: F=1, B=2 (B = 2F on both); M = 2.
    # GPipe: a F0 [0,10] F1 [10,20]; b F0 [10,11] F1 [20,21] B0 [21,23] B1 [23,25]; a B0 [23,43] B1 [43,63].
    # 1F1B:  a F0 [0,10] F1 [10,20] B0 [20,40] B1 [40,60]; b F0 [10,11] B0 [11,13] F1 [20,21] B1 [21,23].
    # a never idles under 1F1B, but waits 3 s for the flush under GPipe.
    stages = chain([10.0, 1.0], [20.0, 2.0])
    assert simulate(stages, 2, "gpipe").makespan_s == gpipe_makespan(stages, 2) == 63.0
    assert simulate(stages, 2, "1f1b").makespan_s == 60.0


def test_compute_order_is_pipedream_flush() -> None:
    assert compute_order("1f1b", 4, 0, 6) == (
        ("forward", 0), ("forward", 1), ("forward", 2),
        ("forward", 3), ("backward", 0), ("forward", 4), ("backward", 1), ("forward", 5), ("backward", 2),
        ("backward", 3), ("backward", 4), ("backward", 5),
    )  # fmt: skip
    assert compute_order("1f1b", 4, 3, 2) == (
        ("forward", 0),
        ("backward", 0),
        ("forward", 1),
        ("backward", 1),
    )
    assert compute_order("1f1b", 4, 0, 2) == (
        ("forward", 0),
        ("forward", 1),
        ("backward", 0),
        ("backward", 1),
    )
    assert compute_order("gpipe", 4, 2, 2) == (
        ("forward", 0),
        ("forward", 1),
        ("backward", 0),
        ("backward", 1),
    )


# ---------------------------------------------------------------- randomised properties


def test_gpipe_simulation_equals_closed_form_on_random_instances() -> None:
    rng = np.random.default_rng(20250919)
    for _ in range(1000):
        num_c, num_mb = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        stages = chain(times(rng, num_c), times(rng, num_c), times(rng, num_c - 1), times(rng, num_c - 1))
        timeline = simulate(stages, num_mb, "gpipe")
        assert math.isclose(timeline.makespan_s, gpipe_makespan(stages, num_mb), rel_tol=REL, abs_tol=1e-12)
        check_timeline(stages, num_mb, "gpipe", timeline)


def test_1f1b_invariants_and_in_flight_on_random_instances() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        num_c, num_mb = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        stages = chain(times(rng, num_c), times(rng, num_c), times(rng, num_c - 1), times(rng, num_c - 1))
        timeline = simulate(stages, num_mb, "1f1b")
        check_timeline(stages, num_mb, "1f1b", timeline)  # no deadlock, exact list schedule
        for i, s in enumerate(stages[::2]):
            peak = timeline.peak_in_flight[s.name]
            assert peak == in_flight_1f1b(num_c, i, num_mb) <= num_mb == in_flight("gpipe", num_c, i, num_mb)
            assert (peak < num_mb) == (num_mb > num_c - i)


def test_both_schedules_respect_lower_bounds() -> None:
    # Any schedule: one micro-batch's round trip, and per compute stage: the fill before it,
    # M·(F_i + B_i) of its own work, then the drain behind it.
    rng = np.random.default_rng(11)
    for _ in range(300):
        num_c, num_mb = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        stages = chain(times(rng, num_c), times(rng, num_c), times(rng, num_c - 1), times(rng, num_c - 1))
        bound = sum(s.forward_s + s.backward_s for s in stages)
        for pos in range(0, len(stages), 2):
            before = sum(s.forward_s + s.backward_s for s in stages[:pos])
            bound = max(bound, before + num_mb * (stages[pos].forward_s + stages[pos].backward_s))
        for schedule in ("gpipe", "1f1b"):
            assert simulate(stages, num_mb, schedule).makespan_s >= bound * (1 - REL)


def test_1f1b_equals_gpipe_on_uniform_compute_and_free_links() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        num_c, num_mb = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        forward, ratio = float(rng.uniform(0.1, 1.0)), float(rng.uniform(0.0, 3.0))
        stages = chain([forward] * num_c, [ratio * forward] * num_c)
        one_f_one_b = simulate(stages, num_mb, "1f1b").makespan_s
        assert math.isclose(one_f_one_b, gpipe_makespan(stages, num_mb), rel_tol=REL)


def test_1f1b_never_slower_than_gpipe_when_links_are_free() -> None:
    # Heterogeneous compute, zero-time links: 1F1B ≤ GPipe, often strictly (no flush wait on the
    # bottleneck). Holds with B = 2F and with unrelated F and B.
    rng = np.random.default_rng(5)
    strictly_faster = 0
    for trial in range(600):
        num_c, num_mb = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        forward = times(rng, num_c)
        backward = [2 * f for f in forward] if trial % 2 else times(rng, num_c)
        stages = chain(forward, backward)
        one_f_one_b, gpipe = simulate(stages, num_mb, "1f1b").makespan_s, gpipe_makespan(stages, num_mb)
        assert one_f_one_b <= gpipe * (1 + REL)
        strictly_faster += one_f_one_b < gpipe * (1 - 1e-6)
    assert strictly_faster > 200


def test_1f1b_with_link_latency_is_bounded_by_folded_gpipe() -> None:
    # Links take time: the 1F1B warm-up (C − i − 1 forwards) does not cover the transfers in the
    # round trip, so 1F1B can be slower than GPipe. It is never slower than GPipe on the chain with
    # every transfer folded into the compute stage that consumes it (folding only removes overlap,
    # and on a free-link chain 1F1B ≤ GPipe), which is itself < 2× GPipe on the original chain.
    rng = np.random.default_rng(13)
    slower = 0
    for trial in range(600):
        num_c, num_mb = int(rng.integers(1, 9)), int(rng.integers(1, 17))
        forward_c, forward_l = times(rng, num_c), times(rng, num_c - 1)
        if trial % 2:  # compute B = 2F, links B = F
            stages = chain(forward_c, [2 * f for f in forward_c], forward_l, forward_l)
        else:
            stages = chain(forward_c, times(rng, num_c), forward_l, times(rng, num_c - 1))
        one_f_one_b, gpipe = simulate(stages, num_mb, "1f1b").makespan_s, gpipe_makespan(stages, num_mb)
        folded_1f1b = simulate(folded(stages), num_mb, "1f1b").makespan_s
        assert one_f_one_b <= folded_1f1b * (1 + REL)
        assert folded_1f1b <= gpipe_makespan(folded(stages), num_mb) * (1 + REL)
        assert one_f_one_b <= 2 * gpipe * (1 + REL)
        slower += one_f_one_b > gpipe * (1 + 1e-6)
    assert slower > 100


def test_1f1b_slowdown_on_identical_stages_and_links() -> None:
    # Compute and links all F = 1, B = 2 (a common B = 2F): stage 0 keeps C micro-batches in flight
    # over a round trip of (2C − 1)·3 s, so its period is 3·(2C − 1)/C s against GPipe's 3 s.
    num_c, num_mb = 4, 16
    stages = chain([1.0] * num_c, [2.0] * num_c, [1.0] * (num_c - 1), [2.0] * (num_c - 1))
    assert gpipe_makespan(stages, num_mb) == 7 + 15 + 14 + 30
    assert simulate(stages, num_mb, "1f1b").makespan_s == 1.5 * gpipe_makespan(stages, num_mb)


def test_one_microbatch_makes_schedules_equal() -> None:
    rng = np.random.default_rng(17)
    for _ in range(100):
        num_c = int(rng.integers(1, 9))
        stages = chain(times(rng, num_c), times(rng, num_c), times(rng, num_c - 1), times(rng, num_c - 1))
        expected = sum(s.forward_s + s.backward_s for s in stages)
        for schedule in ("gpipe", "1f1b"):
            assert math.isclose(
                simulate(stages, 1, schedule).makespan_s, expected, rel_tol=REL, abs_tol=1e-12
            )


def test_large_chain_completes() -> None:
    stages = chain([1.0] * 100, [2.0] * 100, [0.5] * 99, [0.5] * 99)
    for schedule in ("gpipe", "1f1b"):
        timeline = simulate(stages, 64, schedule)
        assert len(timeline.events) == 2 * 100 * 64 + 4 * 99 * 64
    assert simulate(stages, 64, "gpipe").makespan_s == gpipe_makespan(stages, 64)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("stages", "num_mb", "message"),
    [
        ([], 1, "at least one compute stage"),
        ([Stage("a", "compute", 1, 1)], 0, "num_microbatches"),
        ([Stage("a", "compute", 1, 1), Stage("l", "link", 1, 1)], 1, "odd count"),
        ([Stage("l", "link", 1, 1)], 1, "must be 'compute'"),
        (
            [Stage("a", "compute", 1, 1), Stage("b", "compute", 1, 1), Stage("c", "compute", 1, 1)],
            1,
            "'link'",
        ),
        ([Stage("a", "compute", -1, 1)], 1, "forward_s"),
        ([Stage("a", "compute", 1, math.nan)], 1, "backward_s"),
        ([Stage("a", "compute", 1, math.inf)], 1, "backward_s"),
        ([Stage("a", "compute", 1, 1, sender="x")], 1, "leave them empty"),
        ([Stage("a", "compute", 1, 1), Stage("l", "link", 1, 1), Stage("a", "compute", 1, 1)], 1, "twice"),
        (
            [Stage("a", "compute", 1, 1), Stage("l", "link", 1, 1, sender="b"), Stage("b", "compute", 1, 1)],
            1,
            "sender='b'",
        ),
    ],
)
def test_bad_chains_are_rejected(stages: list[Stage], num_mb: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate(stages, num_mb, "gpipe")


def test_bad_schedule_and_in_flight_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown schedule"):
        simulate([Stage("a", "compute", 1, 1)], 1, "zb")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown schedule"):
        in_flight("zb", 2, 0, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compute_index"):
        in_flight_1f1b(2, 2, 4)
    with pytest.raises(ValueError, match="num_microbatches"):
        in_flight_1f1b(2, 0, 0)
    assert (
        in_flight("gpipe", 4, 1, 8) == 8 and in_flight("1f1b", 4, 1, 8) == 3 and in_flight_1f1b(4, 1, 2) == 2
    )
