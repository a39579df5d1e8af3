"""JSON bodies of the hot read endpoints written straight to bytes.

orjson writes the body (NaN and ±inf become null, aware UTC datetimes end in ``Z``: the text pydantic
writes for the same values), skipping the response model's validation and FastAPI's encoder. Routes
that use it keep ``response_model`` so the OpenAPI schema is unchanged.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

JSON_MEDIA_TYPE = "application/json"


def json_bytes(document: Any) -> bytes:
    """``document`` (dicts with str keys, lists, str, int, float, bool, None, datetime) as JSON."""
    return orjson.dumps(document, option=orjson.OPT_UTC_Z)


def json_response(document: Any) -> Response:
    """A 200 response whose body is ``document`` as JSON (see ``json_bytes``)."""
    return Response(json_bytes(document), media_type=JSON_MEDIA_TYPE)
