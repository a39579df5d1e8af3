"""Shared request parameters: bounded ids (they reach SQL integer columns) and pagination."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from backend.text_input import StoredStr

MAX_ID = 2_147_483_647  # 32-bit INTEGER columns on PostgreSQL

IdPath = Annotated[int, Path(ge=1, le=MAX_ID, examples=[1])]
RoundQuery = Annotated[int | None, Query(ge=0, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Offset = Annotated[int, Query(ge=0, le=MAX_ID, description="items to skip")]
Search = Annotated[
    StoredStr | None, Query(max_length=200, description="case-insensitive substring of the name")
]
