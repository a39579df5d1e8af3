"""/api/files: the data directory's datasets, traces and checkpoints. Viewers list; operators upload
(``PUT`` with the file as the body, streamed to disk); admins delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status

from backend.deps import AdminUser, OperatorUser, SettingsDep, ViewerUser
from backend.errors import ERROR_RESPONSES, ErrorResponse
from backend.files import service
from backend.files.schemas import DataFileOut

router = APIRouter(prefix="/api/files", tags=["files"], responses=ERROR_RESPONSES)
UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "the file exists (send overwrite=true)"},
    413: {"model": ErrorResponse, "description": "larger than COLLAPIPE_MAX_UPLOAD_BYTES"},
}


@router.get("")
def list_files(settings: SettingsDep, _user: ViewerUser) -> list[DataFileOut]:
    """Datasets, traces and checkpoints a config may name (data.files, network.trace_file,
    model.pretrained_path)."""
    return service.list_files(settings.data_dir)


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
    _user: OperatorUser,
    overwrite: Annotated[bool, Query(description="replace an existing file")] = False,
) -> DataFileOut:
    """Upload ``datasets/NAME.jsonl|csv|parquet``, ``traces/NAME.csv|json`` or
    ``checkpoints/NAME/FILE`` (each file save_pretrained wrote); the body is the file's bytes."""
    return await service.store(
        settings.data_dir, name, request.stream(), settings.max_upload_bytes, overwrite
    )


@router.delete("/{name:path}", status_code=status.HTTP_204_NO_CONTENT)
def delete_file(name: str, settings: SettingsDep, _user: AdminUser) -> Response:
    """Delete a dataset, a trace or a whole checkpoint directory (``checkpoints/NAME``)."""
    service.delete(settings.data_dir, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
