"""The timeline (Gantt) of one cluster in one stored round, rebuilt from the records: the
redistribution phase (the averaged model, moved optimizer state, each device's segment), then the
first pipeline iteration.

The round's state is rebuilt exactly: the environment from the config in force at that round (forks
switch configs), the virtual queues the decision saw from the round's device rows, channel and
device conditions from the seed and round index, the previous placement from the round before's
decision and device rows (its link rates); the decision from the stored record.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy.orm import Session

from backend.db.models import Run
from backend.errors import InvalidInput, NotFound
from backend.metrics import repository as repo
from backend.metrics.schemas import TimelineEventOut, TimelineOut
from backend.runtime.segments import config_at, plan_segments
from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel.chain import cluster_round_timeline
from collapipe_core.data import DataError, vocab_sizes
from collapipe_core.decision import Decision
from collapipe_core.state import Placement, build_environment, load_device_trace, observe, pretrained_dir
from collapipe_core.workspace import FileRefused, Workspace


def _invalid(field: str, value: int, message: str) -> InvalidInput:
    return InvalidInput(
        f"{field} = {value}: {message}", [{"field": field, "value": value, "message": message}]
    )


def timeline(session: Session, run: Run, round_index: int, cluster: int, workspace: Workspace) -> TimelineOut:
    record = repo.round_record(session, run.id, round_index)
    if record is None:
        raise NotFound(f"run {run.id} has no stored round {round_index} (it has {run.rounds_done} rounds)")
    segments = plan_segments(
        run.config, list(run.replay_configs or []), run.total_rounds, ExperimentConfig.model_validate
    )
    config = config_at(segments, round_index)
    if not 0 <= cluster < config.network.num_clusters:
        raise _invalid("cluster", cluster, f"must be in 0..{config.network.num_clusters - 1}")
    decision = Decision.from_json(record["decision"])
    if decision.mode != "pipeline":
        raise _invalid("round", round_index, f"used mode {decision.mode!r}: no pipeline to draw")
    try:
        trace = load_device_trace(config, workspace)
        pretrained = pretrained_dir(config, workspace)
        vocab = vocab_sizes(config, workspace)
    except (FileRefused, DataError) as err:
        raise InvalidInput(
            f"cannot rebuild round {round_index}: {err}",
            [{"field": err.field, "value": err.value, "message": err.message}],
        ) from None
    env = build_environment(config, *vocab, trace, pretrained)
    queues = np.zeros(env.scenario.shape)
    for row in repo.device_rows(session, run.id, round_index):
        queues[row.cluster, row.device] = row.queue
    try:
        state = observe(env, round_index, queues, _previous_placement(session, run, round_index))
        result = cluster_round_timeline(state, decision, cluster)
    except ValueError as err:
        raise _invalid("round", round_index, f"cannot rebuild the timeline: {err}") from None
    return TimelineOut(
        run_id=run.id,
        round=round_index,
        cluster=cluster,
        schedule=config.training.schedule,
        num_microbatches=decision.clusters[cluster].num_microbatches,
        makespan_s=result.makespan_s,
        redistribution_s=result.redistribution_s,
        peak_in_flight=dict(result.peak_in_flight),
        busy_s=dict(result.busy_s),
        events=[
            TimelineEventOut(
                participant=e.participant,
                kind=e.kind,
                microbatch=e.microbatch,
                start_s=e.start_s,
                end_s=e.end_s,
                peer=e.peer,
                phase=e.phase,
                label=e.label,
            )
            for e in result.events
        ],
    )


def _previous_placement(session: Session, run: Run, round_index: int) -> Placement | None:
    """Where round ``round_index − 1`` left the encoder (its decision and its devices' link rates), as
    the runner carried it into round ``round_index``; None for the first round."""
    record = repo.round_record(session, run.id, round_index - 1) if round_index > 0 else None
    if record is None:
        return None
    previous = Decision.from_json(record["decision"])
    rates = np.zeros(previous.num_blocks().shape)
    for row in repo.device_rows(session, run.id, round_index - 1):
        rates[row.cluster, row.device] = row.rate_bps
    return Placement.of(previous, rates)
