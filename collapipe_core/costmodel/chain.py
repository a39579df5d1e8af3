"""A cluster's pipeline as a chain of stages, and its discrete-event timeline (the dashboard's Gantt).

Chain: CU → link → device → link → ... → device → link → edge server, over the scheduled devices in
order. Forward link times use the sender's rate (the CU's configured rate for the first link),
backward link times the gradient sender's rate (the edge server's downlink for the last link).

:func:`cluster_round_timeline` draws the round's start: the redistribution phase
(:mod:`collapipe_core.costmodel.redistribution`) — the edge server sends the averaged model to the
CU, the previous holders of moved TEBs send their optimizer state to the CU (in parallel), the CU
sends every scheduled device its segment (in parallel) — then the first iteration.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from collapipe_core.costmodel.redistribution import Redistribution, redistribution
from collapipe_core.costmodel.timeline import Stage, Timeline, TimelineEvent, simulate
from collapipe_core.decision import Decision
from collapipe_core.network import device_id

if TYPE_CHECKING:
    from collapipe_core.costmodel.evaluate import StageTimes
    from collapipe_core.state import RoundState


def cluster_stages(
    state: RoundState, decision: Decision, cluster: int, times: StageTimes | None = None
) -> list[Stage]:
    """The stage chain of ``cluster`` with per-micro-batch forward/backward times."""
    from collapipe_core.costmodel.evaluate import stage_times

    t = stage_times(state, decision) if times is None else times
    delta = decision.clusters[cluster].num_blocks
    devices = [k for k, blocks in enumerate(delta) if blocks > 0]
    stages = [Stage("cu", "compute", t.cu_forward_s, t.cu_backward_s)]
    forward_link = t.cu_link_s  # the sender of the next activation transfer
    for k in devices:
        name = device_id(cluster, k)
        send = float(t.device_send_s[cluster, k])
        stages.append(Stage(f"{stages[-1].name}->{name}", "link", forward_link, send))
        stages.append(
            Stage(
                name, "compute", float(t.device_forward_s[cluster, k]), float(t.device_backward_s[cluster, k])
            )
        )
        forward_link = send
    stages.append(Stage(f"{stages[-1].name}->edge", "link", forward_link, t.edge_link_s))
    stages.append(Stage("edge", "compute", t.edge_forward_s, t.edge_backward_s))
    return stages


def cluster_timeline(
    state: RoundState, decision: Decision, cluster: int, times: StageTimes | None = None
) -> Timeline:
    """The per-participant timeline of one pipeline iteration of ``cluster`` under the configured schedule."""
    stages = cluster_stages(state, decision, cluster, times)
    return simulate(stages, decision.clusters[cluster].num_microbatches, state.settings.schedule)


def cluster_round_timeline(state: RoundState, decision: Decision, cluster: int) -> Timeline:
    """The redistribution phase of ``cluster`` (R_n) and then its first pipeline iteration, whose
    events start at R_n (``Timeline.redistribution_s``)."""
    from collapipe_core.costmodel.evaluate import stage_times

    times = stage_times(state, decision)
    iteration = cluster_timeline(state, decision, cluster, times)
    moves = redistribution(state, decision.num_blocks(), decision.mode, times.rate_bps)
    start = float(moves.latency_s[cluster])
    shifted = [
        dataclasses.replace(e, start_s=e.start_s + start, end_s=e.end_s + start) for e in iteration.events
    ]
    events = redistribution_events(moves, decision, cluster) + shifted
    events.sort(key=lambda e: (e.start_s, e.participant))
    return dataclasses.replace(iteration, events=tuple(events), redistribution_s=start)


def redistribution_events(moves: Redistribution, decision: Decision, cluster: int) -> list[TimelineEvent]:
    """The transfers of ``cluster``'s redistribution phase, each on both of its ends."""
    delta = decision.clusters[cluster].num_blocks
    uploads_done = moves.model_s + float(moves.upload_s[cluster].max())
    transfers = [("edge", "cu", 0.0, moves.model_s, "averaged model")]
    for k in range(len(delta)):
        name, sent = device_id(cluster, k), int(moves.moved_out[cluster, k])
        if moves.upload_s[cluster, k] > 0:
            end = moves.model_s + float(moves.upload_s[cluster, k])
            transfers.append((name, "cu", moves.model_s, end, f"optimizer state of {_tebs(sent)}"))
    for k, blocks in enumerate(delta):
        if blocks > 0:
            received = int(moves.moved_in[cluster, k])
            label = f"weights of {_tebs(blocks)}" + (
                f" + optimizer state of {_tebs(received)}" if received else ""
            )
            end = uploads_done + float(moves.download_s[cluster, k])
            transfers.append(("cu", device_id(cluster, k), uploads_done, end, label))
    events = []
    for sender, receiver, start, end, label in transfers:
        events += [
            TimelineEvent(sender, "send", -1, start, end, receiver, phase="redistribution", label=label),
            TimelineEvent(receiver, "receive", -1, start, end, sender, phase="redistribution", label=label),
        ]
    return events


def _tebs(count: int) -> str:
    return f"{count} TEB" + ("" if count == 1 else "s")
