"""A cluster's pipeline as a chain of stages, and its discrete-event timeline (the dashboard's Gantt).

Chain: CU → link → device → link → ... → device → link → edge server, over the scheduled devices in
order. Forward link times use the sender's rate (the CU's configured rate for the first link),
backward link times the gradient sender's rate (the edge server's downlink for the last link).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collapipe_core.costmodel.timeline import Stage, Timeline, simulate
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
