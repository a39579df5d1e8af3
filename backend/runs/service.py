"""The runs API's rules: what a caller may create, cancel, resume, fork or delete, and with which
config. The transitions themselves (state, lease, live event) are ``backend.runtime.lifecycle``'s;
a queued run is handed to the executor after the request commits (``after_commit``).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from backend.config_input import normalized, validated_config
from backend.db.models import Run, User
from backend.db.transaction import after_commit
from backend.errors import Conflict, Forbidden, InvalidInput, NotFound
from backend.experiments import service as experiments
from backend.runs import active_repository as active_repo
from backend.runs import repository as repo
from backend.runs.schemas import RunCreate, RunFork
from backend.runtime import lifecycle
from backend.runtime.dispatch import RunDispatcher
from backend.runtime.execution import checkpoint_dir_for
from backend.runtime.wake import Wake
from backend.users import service as users
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
    session: Session,
    statuses: Sequence[str],
    owner: str | None,
    search: str | None,
    limit: int,
    offset: int,
    in_study: bool | None = None,
    study_id: int | None = None,
) -> tuple[list[Row[Any]], int]:
    if study_id is not None and in_study is False:
        raise InvalidInput(
            "study_id lists one study's runs and in_study=false hides every study's: give one of them",
            [{"field": "study_id", "value": study_id, "message": "not with in_study=false"}],
        )
    return repo.page(session, statuses, owner, search, limit, offset, in_study, study_id)


def check_owner(actor: User, owner_id: int | None, what: str, action: str) -> None:
    """Forbidden unless ``actor`` owns ``what`` or is an admin."""
    if owner_id != actor.id and not users.has_role(actor, "admin"):
        raise Forbidden(f"{what} is another user's; only its owner or an admin may {action} it")


def check_room(session: Session, owner_id: int, new_runs: int, max_active: int) -> None:
    """Conflict when ``new_runs`` more would give the owner more than ``max_active`` queued or running
    runs (a study's runs count: one user cannot fill the queue for everyone)."""
    active = active_repo.active_runs(session, owner_id)
    if active + new_runs > max_active:
        raise Conflict(
            f"{active} queued or running runs already; {new_runs} more would pass the {max_active} one "
            "user may have (COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER): wait for some to finish or cancel some"
        )


def _launch(session: Session, run: Run, wake: Wake, dispatcher: RunDispatcher) -> Run:
    """Store ``run`` queued; the executor gets it once the request commits."""
    lifecycle.create(session, run, wake)
    run_id = run.id
    after_commit(session, lambda: dispatcher.enqueue(run_id))
    return run


def new_run(owner: User, config: ExperimentConfig, name: str | None, **extra: Any) -> Run:
    """A run row for a validated ``config`` (not stored: the lifecycle's ``create`` stores it)."""
    return Run(
        name=name or config.name,
        config=normalized(config),
        owner_id=owner.id,
        total_rounds=config.training.rounds,
        policy=config.scheduler.policy,
        executor=config.executor,
        V=config.scheduler.V,
        num_clusters=config.network.num_clusters,
        devices_per_cluster=config.network.devices_per_cluster,
        **extra,
    )


def create(
    session: Session,
    owner: User,
    body: RunCreate,
    wake: Wake,
    dispatcher: RunDispatcher,
    workspace: Workspace,
    max_active: int,
) -> Run:
    check_room(session, owner.id, 1, max_active)
    if body.experiment_id is not None:
        experiment = experiments.get(session, body.experiment_id)
        config = validated_config(experiment.config, workspace, field="experiment.config")
        run = new_run(owner, config, body.name or experiment.name, experiment_id=experiment.id)
    else:
        assert body.config is not None  # RunCreate guarantees one source
        run = new_run(owner, validated_config(body.config, workspace), body.name)
    return _launch(session, run, wake, dispatcher)


def cancel(session: Session, actor: User, run_id: int, wake: Wake) -> Run:
    """A queued run is cancelled at once; a running one is asked to stop after its current round.
    Only its owner or an admin may cancel it."""
    run = get(session, run_id)
    check_owner(actor, run.owner_id, f"run {run_id}", "cancel")
    if lifecycle.cancel(session, run_id, wake) is None:
        repo.refresh(session, run)
        raise Conflict(f"run {run_id} is {run.status}; only queued or running runs can be cancelled")
    return repo.refresh(session, run)


def resume(
    session: Session, actor: User, run_id: int, wake: Wake, dispatcher: RunDispatcher, max_active: int
) -> Run:
    """A failed or cancelled run goes back to the queue and continues from its last checkpoint. Only
    its owner or an admin may resume it, within the owner's cap of queued or running runs."""
    run = get(session, run_id)
    check_owner(actor, run.owner_id, f"run {run_id}", "resume")
    if run.status in ("failed", "cancelled"):
        check_room(session, run.owner_id if run.owner_id is not None else actor.id, 1, max_active)
    if not lifecycle.resume(session, run_id, wake):
        raise Conflict(f"run {run_id} is {run.status}; only failed or cancelled runs can be resumed")
    after_commit(session, lambda: dispatcher.enqueue(run_id))
    return repo.refresh(session, run)


def fork(
    session: Session,
    owner: User,
    run_id: int,
    body: RunFork,
    wake: Wake,
    dispatcher: RunDispatcher,
    workspace: Workspace,
    max_active: int,
) -> Run:
    """A new run that starts from the parent's state at round k and switches policy/V from k on, and
    runs ``rounds`` rounds in all (default the parent's): a finished run continues with k = its rounds
    done and more rounds. The fork replays the parent's rounds before k with the parent's configs
    (every draw derives from the seed and the round), it copies no checkpoint. Only the parent's owner
    or an admin may fork it; the fork is theirs."""
    parent = get(session, run_id)
    check_owner(owner, parent.owner_id, f"run {run_id}", "fork")
    check_room(session, owner.id, 1, max_active)
    k = body.round
    if k > parent.rounds_done:
        raise InvalidInput(
            f"round {k} is not a state of run {run_id}: it has {parent.rounds_done} of "
            f"{parent.total_rounds} rounds done; choose 0 <= round <= {parent.rounds_done}",
            [{"field": "round", "value": k, "message": "beyond the parent's completed rounds"}],
        )
    total = parent.total_rounds if body.rounds is None else body.rounds
    if total <= k:
        raise InvalidInput(
            f"a fork at round {k} runs the rounds after it: give rounds (its total, the {k} replayed ones "
            f"included) more than {k}" + ("" if body.rounds is not None else f"; run {run_id} has {total}"),
            [{"field": "rounds", "value": body.rounds, "message": f"must be more than round ({k})"}],
        )
    data = dict(parent.config)
    scheduler = dict(data.get("scheduler", {}))
    for key, value in (("policy", body.policy), ("V", body.V), ("segments", body.segments)):
        if value is not None:
            scheduler[key] = value
    data["scheduler"] = scheduler
    data["training"] = {**data.get("training", {}), "rounds": total}
    config = validated_config(data, workspace, field="config")
    replay = [
        {"until_round": min(int(e["until_round"]), k), "config": e["config"]}
        for e in parent.replay_configs or []
    ]
    replay.append({"until_round": k, "config": parent.config})
    settings = f"{config.scheduler.policy}, V={config.scheduler.V:g}"
    if total != parent.total_rounds:
        settings += f", {total} rounds"
    run = new_run(
        owner,
        config,
        f"{parent.name} fork@{k} ({settings})"[:200],
        experiment_id=parent.experiment_id,
        parent_run_id=parent.id,
        fork_round=k,
        replay_configs=replay,
    )
    return _launch(session, run, wake, dispatcher)


def delete(session: Session, run_id: int, artifact_dir: Path) -> None:
    ensure_exists(session, run_id)
    status = lifecycle.delete(session, run_id)
    if status is not None:
        raise Conflict(f"run {run_id} is {status}; cancel it and wait for it to stop before deleting")
    directory = checkpoint_dir_for(artifact_dir, run_id)
    after_commit(session, lambda: shutil.rmtree(directory, ignore_errors=True))
