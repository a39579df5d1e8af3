"""Discrete-event timeline of one pipeline iteration: GPipe and 1F1B over a chain of stages.

The chain is ``compute, link, compute, link, ..., compute`` (CU → devices → edge server), and M
identical micro-batches flow through it: forward left to right, backward right to left.

Model of execution (the product's documented model):

- Every **compute stage** is one resource that runs one operation at a time, in a fixed per-stage
  order given by the schedule. Every **link** is two resources, full duplex: the forward direction
  carries activations sender → receiver, the backward direction carries gradients receiver → sender;
  each direction carries micro-batches FIFO in the order they become ready. Both schedules finish the
  senders' operations in micro-batch order, so that order is 0, 1, ..., M−1.
- Dependencies of micro-batch j: forward on compute stage i needs the forward transfer j of the
  previous link (the first stage needs nothing); a forward transfer needs forward j on its sender.
  Backward j on the last compute stage needs its forward j; on another compute stage it needs its own
  forward j and the backward transfer j of the next link; a backward transfer needs backward j on its
  receiver.
- Per-stage orders (i = 0..C−1 among the C compute stages):
  GPipe: F0, ..., F(M−1), then B0, ..., B(M−1) (a flush).
  1F1B: w = min(C − i − 1, M) warm-up forwards, then pairs F(w), B0, F(w+1), B1, ..., then the
  remaining backwards (PipeDream-flush, the order of torch.distributed.pipelining's Schedule1F1B).
- Every operation starts at max(its resource is free, its dependencies are done).

With every resource order fixed, these rules define a directed acyclic graph of operations (each
depends on its resource predecessor and on its data dependencies); start times are the longest paths
in it, computed by one topological sweep — linear in the number of operations, exact, and a
deadlock (a cycle) would be detected rather than looped on.

GPipe closed form, over ALL stages (compute and link), F_i and B_i per micro-batch:
    T_GPipe = Σ_i F_i + (M−1)·max_i F_i  +  Σ_i B_i + (M−1)·max_i B_i.
Micro-batches in flight (forward done, backward not yet) on compute stage i: GPipe M,
1F1B min(C − i, M).

1F1B against GPipe in this model (checked by the tests, not a closed form): equal for identical
compute stages joined by zero-time links, and for M = 1; never slower when links take no time, and
faster when stages differ (the bottleneck skips the flush wait). Links that take time lengthen the
round trip that the warm-up of C − i − 1 forwards must cover, so 1F1B can be slower than GPipe, by
less than 2× (it is bounded by GPipe on the chain with each transfer folded into the compute stage
that consumes it).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Schedule = Literal["gpipe", "1f1b"]
SCHEDULES: tuple[Schedule, ...] = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Stage:
    """One stage of the chain: a compute participant or the link between two of them."""

    name: str  # participant id ("cu", "c0-d1", "edge", ...) for compute; the link name for links
    kind: Literal["compute", "link"]
    forward_s: float  # one micro-batch: forward compute, or activation transfer
    backward_s: float  # one micro-batch: backward compute, or gradient transfer
    sender: str = ""  # links only: upstream compute stage's name (empty: taken from the chain)
    receiver: str = ""  # links only: downstream compute stage's name (empty: taken from the chain)


@dataclass(frozen=True)
class TimelineEvent:
    """One operation as seen by a participant; a transfer appears on both of its ends."""

    participant: str
    kind: Literal["forward", "backward", "send", "receive"]
    microbatch: int  # -1 for a transfer of the redistribution phase (it carries no micro-batch)
    start_s: float
    end_s: float
    peer: str = ""  # send/receive: the other end
    # "redistribution": a transfer before the first iteration (the averaged model, a segment's weights,
    # moved optimizer state; collapipe_core.costmodel.chain.cluster_round_timeline), ``label`` says which
    phase: Literal["pipeline", "redistribution"] = "pipeline"
    label: str = ""


@dataclass(frozen=True)
class Timeline:
    """The simulated iteration: events sorted by (start_s, participant) and per-stage summaries.

    With a redistribution phase before it (``redistribution_s`` > 0) the iteration's events start at
    ``redistribution_s``; ``makespan_s`` is the iteration's own length either way."""

    events: tuple[TimelineEvent, ...]
    makespan_s: float
    peak_in_flight: dict[str, int]  # compute stage -> most micro-batches with forward done, backward not
    busy_s: dict[str, float]  # compute stage -> M·(F + B)
    redistribution_s: float = 0.0  # R_n: the phase before the iteration (0: none drawn)


# An operation is (position of its stage in the chain, direction, micro-batch); direction 0 is the
# forward compute or the activation transfer, 1 the backward compute or the gradient transfer.
_Op = tuple[int, int, int]


def _validate(stages: Sequence[Stage], num_microbatches: int) -> None:
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be an integer >= 1, got {num_microbatches!r}")
    if not stages:
        raise ValueError("stages is empty; give at least one compute stage")
    if len(stages) % 2 == 0:
        raise ValueError(
            f"got {len(stages)} stages; the chain must be compute, link, ..., compute (an odd count)"
        )
    names: set[str] = set()
    for pos, stage in enumerate(stages):
        expected = "compute" if pos % 2 == 0 else "link"
        if stage.kind != expected:
            raise ValueError(
                f"stage {pos} ({stage.name!r}) is a {stage.kind!r} stage; the chain must alternate "
                f"compute, link, ..., compute, so position {pos} must be {expected!r}"
            )
        for field, value in (("forward_s", stage.forward_s), ("backward_s", stage.backward_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"stage {stage.name!r}: {field} must be finite and >= 0, got {value!r}")
        if stage.kind == "compute":
            if stage.sender or stage.receiver:
                raise ValueError(
                    f"compute stage {stage.name!r}: sender/receiver are for links; leave them empty"
                )
            if stage.name in names:
                raise ValueError(f"compute stage name {stage.name!r} is used twice; names must be unique")
            names.add(stage.name)
        else:
            upstream, downstream = stages[pos - 1].name, stages[pos + 1].name
            if stage.sender not in ("", upstream) or stage.receiver not in ("", downstream):
                raise ValueError(
                    f"link {stage.name!r} joins {upstream!r} → {downstream!r} in the chain but says "
                    f"sender={stage.sender!r}, receiver={stage.receiver!r}; fix them or leave them empty"
                )


def _check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")


def in_flight_1f1b(num_compute_stages: int, compute_index: int, num_microbatches: int) -> int:
    """Peak micro-batches in flight on compute stage i under 1F1B: min(C − i, M)."""
    if num_compute_stages < 1:
        raise ValueError(f"num_compute_stages must be >= 1, got {num_compute_stages}")
    if not 0 <= compute_index < num_compute_stages:
        raise ValueError(f"compute_index must be in [0, {num_compute_stages}), got {compute_index}")
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
    return min(num_compute_stages - compute_index, num_microbatches)


def in_flight(schedule: Schedule, num_compute_stages: int, compute_index: int, num_microbatches: int) -> int:
    """Peak micro-batches in flight on compute stage i: GPipe M, 1F1B min(C − i, M)."""
    _check_schedule(schedule)
    peak_1f1b = in_flight_1f1b(num_compute_stages, compute_index, num_microbatches)
    return num_microbatches if schedule == "gpipe" else peak_1f1b


def compute_order(
    schedule: Schedule, num_compute_stages: int, compute_index: int, num_microbatches: int
) -> tuple[tuple[Literal["forward", "backward"], int], ...]:
    """The fixed order of operations on compute stage i, as (kind, micro-batch) pairs.

    GPipe: F0..F(M−1), B0..B(M−1). 1F1B: w = min(C − i − 1, M) forwards, then F(w), B0, F(w+1), B1,
    ..., then the remaining backwards.
    """
    _check_schedule(schedule)
    in_flight_1f1b(num_compute_stages, compute_index, num_microbatches)  # validates the arguments
    m = num_microbatches
    if schedule == "gpipe":
        return tuple(("forward", j) for j in range(m)) + tuple(("backward", j) for j in range(m))
    warmup = min(num_compute_stages - compute_index - 1, m)
    order: list[tuple[Literal["forward", "backward"], int]] = [("forward", j) for j in range(warmup)]
    for k in range(m - warmup):
        order += [("forward", warmup + k), ("backward", k)]
    order += [("backward", j) for j in range(m - warmup, m)]
    return tuple(order)


def _dependencies(op: _Op, last_pos: int) -> list[_Op]:
    """Data dependencies of an operation (resource order is added separately)."""
    pos, direction, mb = op
    if direction == 0:  # forward compute or activation transfer: the previous stage's forward
        return [(pos - 1, 0, mb)] if pos > 0 else []
    deps = [(pos + 1, 1, mb)] if pos < last_pos else []  # gradient from downstream
    if pos % 2 == 0:
        deps.append((pos, 0, mb))  # a backward needs its own forward
    return deps


def simulate(stages: Sequence[Stage], num_microbatches: int, schedule: Schedule) -> Timeline:
    """Simulate one iteration of the schedule over the chain; see the module docstring for the model."""
    _validate(stages, num_microbatches)
    _check_schedule(schedule)
    m, last_pos = num_microbatches, len(stages) - 1
    num_compute = len(stages) // 2 + 1

    # Resource orders: one per compute stage, two per link (each direction FIFO in micro-batch order).
    compute_orders = [
        [(2 * i, 0 if kind == "forward" else 1, j) for kind, j in compute_order(schedule, num_compute, i, m)]
        for i in range(num_compute)
    ]
    link_orders = [[(pos, d, j) for j in range(m)] for pos in range(1, last_pos, 2) for d in (0, 1)]
    resource_orders = compute_orders + link_orders

    successors: dict[_Op, list[_Op]] = {}
    num_preds: dict[_Op, int] = {}
    for order in resource_orders:
        for index, op in enumerate(order):
            preds = _dependencies(op, last_pos) + ([order[index - 1]] if index else [])
            num_preds[op] = len(preds)
            for pred in preds:
                successors.setdefault(pred, []).append(op)

    # Topological sweep: start = max(end of resource predecessor, ends of dependencies).
    ready_at = dict.fromkeys(num_preds, 0.0)
    end_s: dict[_Op, float] = {}
    queue = deque(op for op, n in num_preds.items() if n == 0)
    while queue:
        op = queue.popleft()
        stage = stages[op[0]]
        end_s[op] = ready_at[op] + (stage.forward_s if op[1] == 0 else stage.backward_s)
        for succ in successors.get(op, ()):
            ready_at[succ] = max(ready_at[succ], end_s[op])
            num_preds[succ] -= 1
            if num_preds[succ] == 0:
                queue.append(succ)
    if len(end_s) != len(num_preds):  # an invariant of the orders above, not a user error
        raise RuntimeError(
            f"schedule {schedule!r} deadlocked: {len(num_preds) - len(end_s)} operations stuck"
        )

    events = [_event for op in end_s for _event in _events_of(op, ready_at[op], end_s[op], stages)]
    events.sort(key=lambda e: (e.start_s, e.participant))  # stable: ties keep topological order
    compute = stages[::2]
    return Timeline(
        events=tuple(events),
        makespan_s=max((e.end_s for e in events), default=0.0),
        peak_in_flight={
            s.name: _peak_in_flight(order) for s, order in zip(compute, compute_orders, strict=True)
        },
        busy_s={s.name: m * (s.forward_s + s.backward_s) for s in compute},
    )


def _events_of(op: _Op, start_s: float, end_s: float, stages: Sequence[Stage]) -> list[TimelineEvent]:
    pos, direction, mb = op
    if pos % 2 == 0:
        kind: Literal["forward", "backward"] = "forward" if direction == 0 else "backward"
        return [TimelineEvent(stages[pos].name, kind, mb, start_s, end_s)]
    upstream, downstream = stages[pos - 1].name, stages[pos + 1].name
    src, dst = (upstream, downstream) if direction == 0 else (downstream, upstream)
    return [
        TimelineEvent(src, "send", mb, start_s, end_s, peer=dst),
        TimelineEvent(dst, "receive", mb, start_s, end_s, peer=src),
    ]


def _peak_in_flight(order: Sequence[_Op]) -> int:
    """Most micro-batches with forward done and backward not, walking the stage's executed order."""
    in_flight_now = peak = 0
    for _pos, direction, _mb in order:
        in_flight_now += 1 if direction == 0 else -1
        peak = max(peak, in_flight_now)
    return peak
