"""Rules of the run lifecycle: queued → running → succeeded | failed | cancelled; cancel, resume, fork.

State changes are conditional UPDATEs, so the API and an executor racing on the same row agree.
Dispatch and live events happen after the commit (``after_commit``).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from backend.config_input import normalized, validated_config
from backend.db.base import utcnow
from backend.db.models import Run, User
from backend.db.transaction import after_commit
from backend.errors import Conflict, InvalidInput, NotFound
from backend.experiments import service as experiments
from backend.live.channel import STATUS, LiveChannel, status_payload
from backend.runs import repository as repo
from backend.runs.dispatch import RunDispatcher
from backend.runs.execution import checkpoint_dir_for
from backend.runs.schemas import RunCreate, RunFork
from collapipe_core.config import ExperimentConfig
from collapipe_core.workspace import Workspace


def get(session: Session, run_id: int) -> Run:
    run = repo.get(session, run_id)
    if run is None:
        raise NotFound(f"no run with id {run_id}")
    return run


def ensure_exists(session: Session, run_id: int) -> None:
    """NotFound unless the run exists (reads its id only, not the row's configs)."""
    if not repo.exists(session, run_id):
        raise NotFound(f"no run with id {run_id}")


def page(
    session: Session, statuses: Sequence[str], owner: str | None, search: str | None, limit: int, offset: int
) -> tuple[list[Row[Any]], int]:
    return repo.page(session, statuses, owner, search, limit, offset)


def _announce(session: Session, run: Run, channel: LiveChannel, dispatcher: RunDispatcher | None) -> None:
    """After the commit: publish the run's status and, if it is queued, hand it to the executor."""
    run_id, status, done, total, error = run.id, run.status, run.rounds_done, run.total_rounds, run.error

    def publish() -> None:
        channel.publish(run_id, STATUS, status_payload(run_id, status, done, total, error))

    after_commit(session, publish)
    if dispatcher is not None:
        after_commit(session, lambda: dispatcher.enqueue(run_id))


def _new_run(owner: User, config: ExperimentConfig, name: str | None, **extra: Any) -> Run:
    return Run(
        name=name or config.name,
        config=normalized(config),
        status="queued",
        owner_id=owner.id,
        total_rounds=config.training.rounds,
        policy=config.scheduler.policy,
        executor=config.executor,
        **extra,
    )


def create(
    session: Session,
    owner: User,
    body: RunCreate,
    channel: LiveChannel,
    dispatcher: RunDispatcher,
    workspace: Workspace,
) -> Run:
    if body.experiment_id is not None:
        experiment = experiments.get(session, body.experiment_id)
        config = validated_config(experiment.config, workspace, field="experiment.config")
        run = _new_run(owner, config, body.name or experiment.name, experiment_id=experiment.id)
    else:
        assert body.config is not None  # RunCreate guarantees one source
        run = _new_run(owner, validated_config(body.config, workspace), body.name)
    repo.add(session, run)
    _announce(session, run, channel, dispatcher)
    return run


def cancel(session: Session, run_id: int, channel: LiveChannel) -> Run:
    """A queued run is cancelled at once; a running one is asked to stop after its current round."""
    run = get(session, run_id)
    if repo.cancel_if_queued(session, run_id, utcnow()):
        repo.refresh(session, run)
        _announce(session, run, channel, None)
    elif not repo.request_cancel_if_running(session, run_id):
        repo.refresh(session, run)
        raise Conflict(f"run {run_id} is {run.status}; only queued or running runs can be cancelled")
    return repo.refresh(session, run)


def resume(session: Session, run_id: int, channel: LiveChannel, dispatcher: RunDispatcher) -> Run:
    """A failed or cancelled run goes back to the queue and continues from its last checkpoint."""
    run = get(session, run_id)
    if not repo.requeue_if_finished_badly(session, run_id):
        raise Conflict(f"run {run_id} is {run.status}; only failed or cancelled runs can be resumed")
    repo.refresh(session, run)
    _announce(session, run, channel, dispatcher)
    return run


def fork(
    session: Session,
    owner: User,
    run_id: int,
    body: RunFork,
    channel: LiveChannel,
    dispatcher: RunDispatcher,
    workspace: Workspace,
) -> Run:
    """A new run that starts from the parent's state at round k and switches policy/V from k on."""
    parent = get(session, run_id)
    k = body.round
    if k > parent.rounds_done or k >= parent.total_rounds:
        latest = min(parent.rounds_done, parent.total_rounds - 1)
        raise InvalidInput(
            f"round {k} is not a state of run {run_id}: it has {parent.rounds_done} of "
            f"{parent.total_rounds} rounds done; choose 0 <= round <= {latest}",
            [{"field": "round", "value": k, "message": "beyond the parent's completed rounds"}],
        )
    data = dict(parent.config)
    scheduler = dict(data.get("scheduler", {}))
    for key, value in (("policy", body.policy), ("V", body.V), ("segments", body.segments)):
        if value is not None:
            scheduler[key] = value
    data["scheduler"] = scheduler
    config = validated_config(data, workspace, field="config")
    replay = [
        {"until_round": min(int(e["until_round"]), k), "config": e["config"]}
        for e in parent.replay_configs or []
    ]
    replay.append({"until_round": k, "config": parent.config})
    name = f"{parent.name} fork@{k} ({config.scheduler.policy}, V={config.scheduler.V:g})"[:200]
    run = _new_run(
        owner,
        config,
        name,
        experiment_id=parent.experiment_id,
        parent_run_id=parent.id,
        fork_round=k,
        replay_configs=replay,
    )
    repo.add(session, run)
    _announce(session, run, channel, dispatcher)
    return run


def delete(session: Session, run_id: int, artifact_dir: Path) -> None:
    run = get(session, run_id)
    if run.status in ("queued", "running"):
        raise Conflict(f"run {run_id} is {run.status}; cancel it and wait for it to stop before deleting")
    repo.delete(session, run)
    directory = checkpoint_dir_for(artifact_dir, run_id)
    after_commit(session, lambda: shutil.rmtree(directory, ignore_errors=True))
