"""/api/experiments: saved configs. Viewers read; operators create, edit and clone; admins delete."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from backend.deps import AdminUser, OperatorUser, SessionDep, ViewerUser, WorkspaceDep
from backend.errors import ERROR_RESPONSES
from backend.experiments import service
from backend.experiments.schemas import (
    ExperimentClone,
    ExperimentCreate,
    ExperimentOut,
    ExperimentPage,
    ExperimentUpdate,
)
from backend.params import IdPath, Limit, Offset, Search

router = APIRouter(prefix="/api/experiments", tags=["experiments"], responses=ERROR_RESPONSES)


@router.get("")
def list_experiments(
    session: SessionDep, _user: ViewerUser, search: Search = None, limit: Limit = 50, offset: Offset = 0
) -> ExperimentPage:
    items, total = service.page(session, search, limit, offset)
    return ExperimentPage(
        items=[ExperimentOut.model_validate(e) for e in items], total=total, limit=limit, offset=offset
    )


@router.post("", status_code=status.HTTP_201_CREATED)
def create_experiment(
    body: ExperimentCreate, session: SessionDep, user: OperatorUser, workspace: WorkspaceDep
) -> ExperimentOut:
    return ExperimentOut.model_validate(service.create(session, user, body, workspace))


@router.get("/{experiment_id}")
def get_experiment(experiment_id: IdPath, session: SessionDep, _user: ViewerUser) -> ExperimentOut:
    return ExperimentOut.model_validate(service.get(session, experiment_id))


@router.patch("/{experiment_id}")
def update_experiment(
    experiment_id: IdPath,
    body: ExperimentUpdate,
    session: SessionDep,
    _user: OperatorUser,
    workspace: WorkspaceDep,
) -> ExperimentOut:
    return ExperimentOut.model_validate(service.update(session, experiment_id, body, workspace))


@router.post("/{experiment_id}/clone", status_code=status.HTTP_201_CREATED)
def clone_experiment(
    experiment_id: IdPath, session: SessionDep, user: OperatorUser, body: ExperimentClone | None = None
) -> ExperimentOut:
    name = body.name if body is not None else None
    return ExperimentOut.model_validate(service.clone(session, user, experiment_id, name))


@router.delete(
    "/{experiment_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={409: {"model": ERROR_RESPONSES[404]["model"], "description": "runs use it"}},
)
def delete_experiment(experiment_id: IdPath, session: SessionDep, _user: AdminUser) -> Response:
    service.delete(session, experiment_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
