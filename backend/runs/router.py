"""/api/runs: launch, list, inspect, cancel, resume, fork, delete. Viewers read; operators act."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from backend.deps import (
    AdminUser,
    DispatcherDep,
    OperatorUser,
    SessionDep,
    SettingsDep,
    StreamViewer,
    ViewerUser,
    WakeDep,
    WorkspaceDep,
    in_one_thread,
)
from backend.errors import ERROR_RESPONSES, ErrorResponse
from backend.params import MAX_ID, IdPath, Limit, Offset, Search
from backend.runs import model_archive, read_model, service
from backend.runs.schemas import (
    RunCreate,
    RunDetail,
    RunFork,
    RunListItem,
    RunOut,
    RunPage,
    RunStatus,
    RunView,
)
from backend.text_input import StoredStr

LISTED_FIELDS = tuple(RunListItem.model_fields)
router = APIRouter(prefix="/api/runs", tags=["runs"], responses=ERROR_RESPONSES)
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "not allowed in the run's current status, or past a cap"}
}


@router.post("", status_code=status.HTTP_201_CREATED)
def create_run(
    body: RunCreate,
    session: SessionDep,
    user: OperatorUser,
    wake: WakeDep,
    dispatcher: DispatcherDep,
    workspace: WorkspaceDep,
    settings: SettingsDep,
) -> RunDetail:
    """Validate the config, store the run as queued; it is dispatched once this request commits.
    409 when you already have COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER runs queued or running."""
    run = service.create(session, user, body, wake, dispatcher, workspace, settings.max_active_runs_per_user)
    return RunDetail.model_validate(run)


@router.get("")
async def list_runs(
    session: SessionDep,
    _user: ViewerUser,
    status_in: Annotated[list[RunStatus], Query(alias="status", max_length=5)] = [],  # noqa: B006
    owner: Annotated[StoredStr | None, Query(max_length=64, description="username")] = None,
    search: Search = None,
    limit: Limit = 50,
    offset: Offset = 0,
    in_study: Annotated[
        bool | None, Query(description="true: only runs of a study; false: only runs of no study")
    ] = None,
    study_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only this study's runs")] = None,
) -> RunPage:
    """A page of runs, newest first, each with its owner's name and its latest round's figures."""

    def page() -> RunPage:  # the dashboards' most frequent request: in one thread hop
        items, total = service.page(session, status_in, owner, search, limit, offset, in_study, study_id)
        rows = [RunListItem(**dict(zip(LISTED_FIELDS, row, strict=True))) for row in items]
        return RunPage(items=rows, total=total, limit=limit, offset=offset)

    return await in_one_thread(session, page)


@router.get("/{run_id}")
def get_run(run_id: IdPath, session: SessionDep, _user: ViewerUser) -> RunView:
    """The run with its config, its owner's name and ``last_event_id``: load its rounds up to
    ``rounds_done - 1``, then stream ``/api/runs/{id}/events?after=<last_event_id>``."""
    return read_model.view(session, run_id)


@router.post("/{run_id}/cancel", responses=CONFLICT)
def cancel_run(run_id: IdPath, session: SessionDep, user: OperatorUser, wake: WakeDep) -> RunOut:
    """Queued: cancelled at once. Running: stops after its current round (cancel_requested). The
    run's owner or an admin only."""
    return RunOut.model_validate(service.cancel(session, user, run_id, wake))


@router.post("/{run_id}/resume", responses=CONFLICT)
def resume_run(
    run_id: IdPath,
    session: SessionDep,
    user: OperatorUser,
    wake: WakeDep,
    dispatcher: DispatcherDep,
    settings: SettingsDep,
) -> RunOut:
    """A failed or cancelled run is queued again and continues from its last checkpoint. The run's
    owner or an admin only, within the owner's COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER."""
    run = service.resume(session, user, run_id, wake, dispatcher, settings.max_active_runs_per_user)
    return RunOut.model_validate(run)


@router.post("/{run_id}/fork", status_code=status.HTTP_201_CREATED)
def fork_run(
    run_id: IdPath,
    body: RunFork,
    session: SessionDep,
    user: OperatorUser,
    wake: WakeDep,
    dispatcher: DispatcherDep,
    workspace: WorkspaceDep,
    settings: SettingsDep,
) -> RunDetail:
    """A new run starting from this run's state at round k, with another policy, V or segments; yours.
    The run's owner or an admin only, within your COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER."""
    fork = service.fork(
        session, user, run_id, body, wake, dispatcher, workspace, settings.max_active_runs_per_user
    )
    return RunDetail.model_validate(fork)


MODEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {model_archive.MEDIA_TYPE: {}}, "description": "a tar archive of one folder"},
    409: {"model": ErrorResponse, "description": "the run is not finished, or has no checkpoint"},
    413: {"model": ErrorResponse, "description": "past COLLAPIPE_MAX_EXPORT_BYTES"},
    429: {"model": ErrorResponse, "description": "another model is being exported; see Retry-After"},
}


@router.get("/{run_id}/model", response_class=StreamingResponse, responses=MODEL_RESPONSES)
async def download_model(
    run_id: IdPath,
    request: Request,
    _access: StreamViewer,
    settings: SettingsDep,
    workspace: WorkspaceDep,
    merged: Annotated[
        bool, Query(description="a LoRA run's adapter merged into its base (a whole model)")
    ] = False,
) -> StreamingResponse:
    """The trained model of a succeeded or cancelled run as a tar archive of one folder,
    ``run-<id>-model/``: the transformers ``save_pretrained`` directory (a builtin model: safetensors and
    collapipe.json), a LoRA run's peft adapter directory, the run's tokenizer (docs/models.md, "Getting
    the model out"). Built from the run's latest checkpoint on first request, then served from a cached
    file, streamed. 422: an analytic run (no weights), or merged for a run without adapters."""
    archive = await model_archive.model_archive(
        request.app.state.read_session_factory,
        run_id,
        merged=merged,
        artifact_dir=settings.artifact_dir,
        workspace=workspace,
        max_bytes=settings.max_export_bytes,
    )
    headers = {
        "Content-Length": str(archive.size_bytes),
        "Content-Disposition": f'attachment; filename="{archive.filename}"',
    }
    return StreamingResponse(archive.chunks(), media_type=model_archive.MEDIA_TYPE, headers=headers)


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT, responses=CONFLICT)
def delete_run(run_id: IdPath, session: SessionDep, _user: AdminUser, settings: SettingsDep) -> Response:
    service.delete(session, run_id, settings.artifact_dir)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
