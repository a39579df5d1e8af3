"""Response bodies of the data directory's files."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

FileKind = Literal["dataset", "trace", "checkpoint"]


class DataFileOut(BaseModel):
    name: str = Field(
        description="what a config names: data.files.train, network.trace_file, model.pretrained_path"
    )
    kind: FileKind
    size_bytes: int = Field(description="a checkpoint: all its files")
    modified_at: datetime
    files: list[str] | None = Field(default=None, description="a checkpoint's files")
    complete: bool = Field(
        default=True,
        description="a checkpoint has its config.json (one still uploading, or cut short, has not)",
    )
    uploaded_by: str | None = Field(
        default=None,
        description="the user who uploaded it (a checkpoint: its files); none for a file placed on the "
        "server by other means. Only they or an admin may replace it",
    )
