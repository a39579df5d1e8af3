"""Rules of saved experiments: configs are validated by the core before they are stored."""

from __future__ import annotations

from sqlalchemy.orm import Session

from backend.config_input import normalized, validated_config
from backend.db.base import utcnow
from backend.db.models import Experiment, User
from backend.errors import Conflict, NotFound
from backend.experiments import repository as repo
from backend.experiments.schemas import ExperimentCreate, ExperimentUpdate
from collapipe_core.workspace import Workspace


def get(session: Session, experiment_id: int) -> Experiment:
    experiment = repo.get(session, experiment_id)
    if experiment is None:
        raise NotFound(f"no experiment with id {experiment_id}")
    return experiment


def create(session: Session, owner: User, body: ExperimentCreate, workspace: Workspace) -> Experiment:
    config = validated_config(body.config, workspace)
    return repo.add(
        session, Experiment(name=body.name or config.name, config=normalized(config), owner_id=owner.id)
    )


def update(session: Session, experiment_id: int, body: ExperimentUpdate, workspace: Workspace) -> Experiment:
    experiment = get(session, experiment_id)
    if body.config is not None:
        experiment.config = normalized(validated_config(body.config, workspace))
    if body.name is not None:
        experiment.name = body.name
    experiment.updated_at = utcnow()
    session.flush()
    return experiment


def clone(session: Session, owner: User, experiment_id: int, name: str | None) -> Experiment:
    source = get(session, experiment_id)
    copy_name = name or f"{source.name} (copy)"[:200]
    return repo.add(session, Experiment(name=copy_name, config=dict(source.config), owner_id=owner.id))


def delete(session: Session, experiment_id: int) -> None:
    experiment = get(session, experiment_id)
    runs = repo.count_runs(session, experiment_id)
    if runs:
        active = repo.count_active_runs(session, experiment_id)
        raise Conflict(
            f"experiment {experiment_id} is used by {runs} run(s) ({active} queued or running); "
            "delete those runs first",
            {"runs": runs, "active_runs": active},
        )
    repo.delete(session, experiment)


def page(session: Session, search: str | None, limit: int, offset: int) -> tuple[list[Experiment], int]:
    return repo.page(session, search, limit, offset)
