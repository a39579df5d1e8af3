"""Metric reads of runs: /api/runs/{id}/rounds|devices|decisions|timeline|export and /api/compare."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as FastApiPath
from fastapi.responses import StreamingResponse
from pydantic import Field

from backend.deps import SeriesCacheDep, SessionDep, ViewerUser, WorkspaceDep
from backend.errors import ERROR_RESPONSES
from backend.metrics import compare as comparing
from backend.metrics import export as exporting
from backend.metrics import service
from backend.metrics.downsample import MAX_POINTS, MIN_POINTS, Method
from backend.metrics.fields import DEVICE_FIELDS, ROUND_FIELDS
from backend.metrics.schemas import (
    CompareOut,
    DecisionPage,
    DeviceSeries,
    RoundDevicesPage,
    RoundSeries,
    TimelineOut,
)
from backend.metrics.timeline import timeline
from backend.params import MAX_ID, IdPath, Limit, Offset, RoundQuery
from backend.runs import service as runs

router = APIRouter(tags=["metrics"], responses=ERROR_RESPONSES)

MAX_DEVICES_PAGE = 1000

MaxPoints = Annotated[
    int, Query(ge=MIN_POINTS, le=MAX_POINTS, description="downsample to at most this many points")
]
MethodQuery = Annotated[Method, Query(description="lttb (shape), minmax (extremes), mean (buckets), none")]
FromRound = Annotated[RoundQuery, Query(alias="from", description="first round (inclusive)")]
ToRound = Annotated[RoundQuery, Query(alias="to", description="last round (inclusive)")]
# an eval loss (cross-entropy) is at least 0; the bounds also refuse NaN and infinities
TargetEvalLoss = Annotated[
    float | None,
    Query(
        ge=0,
        le=1e30,
        allow_inf_nan=False,
        description="eval loss to measure each run's modeled time to (time_to_target_s); omit for none",
    ),
]


@router.get("/api/runs/{run_id}/rounds", response_model=RoundSeries)
def round_series(
    run_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    cache: SeriesCacheDep,
    fields: Annotated[list[str], Query(max_length=32, description=f"any of {', '.join(ROUND_FIELDS)}")] = [],  # noqa: B006
    from_round: FromRound = None,
    to_round: ToRound = None,
    max_points: MaxPoints = 2000,
    method: MethodQuery = "lttb",
) -> Response:
    # the body is pydantic's serialisation of the built RoundSeries, reused while no round is added
    body = service.round_series_body(session, cache, run_id, fields, from_round, to_round, max_points, method)
    return Response(body, media_type="application/json")


MetricSpec = Annotated[str, Field(pattern=r"^[a-z_]{1,64}(:[0-9]{1,6}(:[a-z]{1,8})?)?$")]


@router.get("/api/runs/{run_id}/devices")
def device_series(
    run_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    metric: Annotated[
        list[MetricSpec],
        Query(
            min_length=1,
            max_length=len(DEVICE_FIELDS),
            description=f"repeated, each {service.METRIC_SPEC} (its own downsampling, else max_points "
            f"and method); NAME one of {', '.join(DEVICE_FIELDS)}",
            examples=[["energy_j", "energy_budget_j:2", "num_blocks:150:mean"]],
        ),
    ],
    device_id: Annotated[list[str], Query(max_length=1000, description="e.g. c0-d1; default all")] = [],  # noqa: B006
    cluster: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    all_devices: Annotated[
        list[Annotated[str, Field(max_length=64)]],
        Query(
            max_length=len(DEVICE_FIELDS),
            description="names of metrics asked that are read for every device, whatever device_id "
            "and cluster select (e.g. a heatmap of all devices beside charts of one cluster)",
        ),
    ] = [],  # noqa: B006
    from_round: FromRound = None,
    to_round: ToRound = None,
    max_points: MaxPoints = 2000,
    method: MethodQuery = "lttb",
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_DEVICES_PAGE,
            description="a page of this many of the devices selected (cluster then device order); "
            "default all, as long as the request reads at most 2,000,000 stored rows",
        ),
    ] = None,
    offset: Offset = 0,
) -> DeviceSeries:
    """Per-device series of several metrics in one request, each downsampled per device."""
    queries = service.device_metric_queries(metric, max_points, method, all_devices)
    return service.device_series(
        session, run_id, queries, device_id, cluster, from_round, to_round, limit, offset
    )


@router.get("/api/runs/{run_id}/decisions")
def decisions(
    run_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    from_round: FromRound = None,
    to_round: ToRound = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> DecisionPage:
    """Each round's decision (per cluster M; per device δ, β, p) with its objective and feasibility,
    and what the distributed executor measured on each participant."""
    return service.decisions(session, run_id, from_round, to_round, limit, offset)


@router.get("/api/runs/{run_id}/rounds/{round}/devices")
def round_devices(
    run_id: IdPath,
    round: Annotated[int, FastApiPath(ge=0, le=MAX_ID)],
    session: SessionDep,
    _user: ViewerUser,
    limit: Annotated[int, Query(ge=1, le=MAX_DEVICES_PAGE, description="page size")] = MAX_DEVICES_PAGE,
    offset: Offset = 0,
) -> RoundDevicesPage:
    """One stored round's device records, a page at a time (a live ``round`` event carries the first
    ones; a round of more devices says how many in ``devices_total``)."""
    return service.round_devices(session, run_id, round, limit, offset)


@router.get("/api/runs/{run_id}/timeline")
def round_timeline(
    run_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    workspace: WorkspaceDep,
    round: Annotated[int, Query(ge=0, le=MAX_ID)],
    cluster: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> TimelineOut:
    """The discrete-event pipeline timeline (Gantt) of one cluster's iteration in a stored round."""
    return timeline(session, runs.get(session, run_id), round, cluster, workspace)


EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {
            "text/csv": {"schema": {"type": "string"}},
            "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
        },
        "description": "the table as a file",
    }
}
MEDIA_TYPES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet"}


@router.get("/api/runs/{run_id}/export", response_class=StreamingResponse, responses=EXPORT_RESPONSES)
def export(
    run_id: IdPath,
    request: Request,
    session: SessionDep,
    _user: ViewerUser,
    format: exporting.ExportFormat = "csv",
    table: exporting.ExportTable = "rounds",
) -> StreamingResponse:
    """All stored rounds (or per-device rows) of a run as CSV or Parquet, streamed as it is read."""
    runs.ensure_exists(session, run_id)
    chunks = exporting.export(request.app.state.session_factory, run_id, table, format)
    filename = f"run-{run_id}-{table}.{format}"
    return StreamingResponse(
        chunks,
        media_type=MEDIA_TYPES[format],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/api/compare")
def compare(
    session: SessionDep,
    _user: ViewerUser,
    run_ids: Annotated[
        list[Annotated[str, Field(pattern=r"^[0-9]{1,9}(,[0-9]{1,9}){0,49}$")]],
        Query(
            min_length=1,
            max_length=50,
            description="run ids, repeated (run_ids=1&run_ids=2) or comma-separated (run_ids=1,2)",
        ),
    ],
    baseline: Annotated[int | None, Query(ge=1, le=MAX_ID, description="default: the first run")] = None,
    target_eval_loss: TargetEvalLoss = None,
) -> CompareOut:
    """Summary figures of several runs and their ratios to the baseline run; with
    ``target_eval_loss``, each run's modeled time and rounds to reach it."""
    ids = [int(part) for item in run_ids for part in item.split(",")]
    return comparing.compare(session, ids, baseline, target_eval_loss)
