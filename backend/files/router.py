"""/api/files: the data directory's datasets, traces and checkpoints. Viewers list; operators upload
(``PUT`` with the file as the body, streamed to disk); admins delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from backend.deps import AdminUser, SessionDep, SettingsDep, UploaderUser, ViewerUser
from backend.errors import ERROR_RESPONSES, ErrorResponse
from backend.files import repository, service
from backend.files.schemas import DataFileOut

router = APIRouter(prefix="/api/files", tags=["files"], responses=ERROR_RESPONSES)
UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "the file exists (send overwrite=true), or may not change"},
    413: {"model": ErrorResponse, "description": "past COLLAPIPE_MAX_UPLOAD_BYTES or a quota"},
}


@router.get("")
def list_files(session: SessionDep, settings: SettingsDep, _user: ViewerUser) -> list[DataFileOut]:
    """Datasets, traces and checkpoints a config may name (data.files, network.trace_file,
    model.pretrained_path), each with its uploader."""
    return service.list_files(settings.data_dir, repository.uploaders(session))


@router.put(
    "/{name:path}",
    status_code=status.HTTP_201_CREATED,
    responses=UPLOAD_RESPONSES,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_file(
    name: str,
    request: Request,
    settings: SettingsDep,
    user: UploaderUser,
    overwrite: Annotated[bool, Query(description="replace an existing file (yours, or as an admin)")] = False,
) -> DataFileOut:
    """Upload ``datasets/NAME.jsonl|csv|parquet``, ``traces/NAME.csv|json`` or
    ``checkpoints/NAME/FILE`` (each file save_pretrained wrote); the body is the file's bytes. 403:
    the file (or checkpoint) is another user's; 409: it exists without overwrite, a queued or running
    run names it, a link is on the way, or the file count is at its cap; 413: past a size limit or
    quota (the message names it)."""
    declared = request.headers.get("content-length")
    return await service.store(
        request.app.state.session_factory,
        settings.data_dir,
        name,
        request.stream(),
        user,
        overwrite,
        service.UploadLimits.of(settings),
        int(declared) if declared is not None and declared.isdigit() else None,
    )


@router.delete("/{name:path}", status_code=status.HTTP_204_NO_CONTENT)
def delete_file(name: str, session: SessionDep, settings: SettingsDep, _user: AdminUser) -> Response:
    """Delete a dataset, a trace or a whole checkpoint directory (``checkpoints/NAME``)."""
    service.delete(session, settings.data_dir, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
