"""Request and response bodies of saved experiments."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backend.request_body import StrictBody
from backend.text_input import StoredStr

CONFIG_DOC = "experiment config (YAML/JSON document as an object); schema at GET /api/config/schema"


class ExperimentCreate(StrictBody):
    name: StoredStr | None = Field(
        default=None, min_length=1, max_length=200, description="default: config.name"
    )
    config: dict[str, Any] = Field(description=CONFIG_DOC)


class ExperimentUpdate(StrictBody):
    name: StoredStr | None = Field(default=None, min_length=1, max_length=200)
    config: dict[str, Any] | None = Field(default=None, description=CONFIG_DOC)


class ExperimentClone(StrictBody):
    name: StoredStr | None = Field(
        default=None, min_length=1, max_length=200, description="default: '<name> (copy)'"
    )


class ExperimentOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    config: dict[str, Any]
    owner_id: int | None
    created_at: datetime
    updated_at: datetime


class ExperimentPage(BaseModel):
    items: list[ExperimentOut]
    total: int
    limit: int
    offset: int
