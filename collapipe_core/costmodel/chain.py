"""A cluster's pipeline as a chain of stages, and its discrete-event timeline (the dashboard's Gantt).

Chain: CU → link → device → link → ... → device → link → edge server, over the scheduled devices in
order, with the closed form's per-micro-batch stage times
(:func:`~collapipe_core.costmodel.closed_form.stage_times`). Forward link times use the sender's rate
(the CU's configured rate for the first link), backward link times the gradient sender's rate (the edge
server's downlink for the last link); every transfer includes the link latency τ.

:func:`cluster_round_timeline` draws the round's start: the redistribution phase
(:func:`~collapipe_core.costmodel.closed_form.redistribution`) — the edge server sends the averaged model
to the CU, the previous holders of moved TEBs send their optimizer state to the CU (in parallel), the CU
sends every scheduled device its segment (in parallel) — then the first iteration.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from collapipe_core.costmodel.closed_form import Redistribution, StageTimes, redistribution, stage_times
from collapipe_core.costmodel.problem import build_problem
from collapipe_core.costmodel.timeline import Stage, Timeline, TimelineEvent, simulate
from collapipe_core.decision import Decision
from collapipe_core.network import device_id

if TYPE_CHECKING:
    from collapipe_core.state import RoundState


def cluster_stages(times: StageTimes, decision: Decision, cluster: int) -> list[Stage]:
    """The stage chain of ``cluster`` with per-micro-batch forward/backward times (``times`` (N, K), (N,))."""
    delta = decision.clusters[cluster].num_blocks
    devices = [k for k, blocks in enumerate(delta) if blocks > 0]
    t, n = times, cluster
    stages = [Stage("cu", "compute", float(t.cu_forward_s[n]), float(t.cu_backward_s[n]))]
    forward_link = float(t.cu_link_s[n])  # the sender of the next activation transfer
    for k in devices:
        name = device_id(cluster, k)
        send = float(t.device_send_s[n, k])
        stages.append(Stage(f"{stages[-1].name}->{name}", "link", forward_link, send))
        stages.append(
            Stage(name, "compute", float(t.device_forward_s[n, k]), float(t.device_backward_s[n, k]))
        )
        forward_link = send
    stages.append(Stage(f"{stages[-1].name}->edge", "link", forward_link, float(t.edge_link_s[n])))
    stages.append(Stage("edge", "compute", float(t.edge_forward_s[n]), float(t.edge_backward_s[n])))
    return stages


def cluster_round_timeline(state: RoundState, decision: Decision, cluster: int) -> Timeline:
    """The redistribution phase of ``cluster`` (R_n) and then its first pipeline iteration under the
    configured schedule, whose events start at R_n (``Timeline.redistribution_s``)."""
    pr = build_problem(state)
    delta, micro = decision.num_blocks(), decision.num_microbatches()
    u = np.where(delta > 0, pr.time_per_bit(decision.bandwidth_share(), decision.power_w()), 0.0)
    times = stage_times(pr, delta, micro, u)
    iteration = simulate(cluster_stages(times, decision, cluster), int(micro[cluster]), pr.schedule)
    moves = redistribution(pr, delta, u, decision.mode == "replicated")
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
    model_s = moves.model_s
    uploads_done = model_s + float(moves.upload_s[cluster].max())
    transfers = [("edge", "cu", 0.0, model_s, "averaged model")]
    for k in range(len(delta)):
        name, sent = device_id(cluster, k), int(moves.moved_out[cluster, k])
        if moves.upload_s[cluster, k] > 0:
            end = model_s + float(moves.upload_s[cluster, k])
            transfers.append((name, "cu", model_s, end, f"optimizer state of {_tebs(sent)}"))
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
