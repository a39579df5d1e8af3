"""/api/studies: launch a study (a grid of runs), list and inspect studies with their per-cell
summaries and round series, cancel or resume all their runs, stream their progress, export their
tables. Viewers read; operators act."""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from backend.db.engine import SessionFactory
from backend.deps import (
    ChannelDep,
    DispatcherDep,
    OperatorUser,
    SessionDep,
    SettingsDep,
    StreamViewer,
    ViewerUser,
    WakeDep,
    WorkspaceDep,
)
from backend.errors import ERROR_RESPONSES
from backend.live.router import SSE_RESPONSE, AfterQuery, LastEventIdHeader, event_stream, resume_point
from backend.live.sse import compact
from backend.metrics.downsample import MAX_POINTS, MIN_POINTS, Method
from backend.metrics.fields import ROUND_FIELDS
from backend.params import IdPath, Limit, Offset, Search
from backend.studies import export, presets, series, service, summary
from backend.studies.schemas import (
    ExportFormat,
    SeriesX,
    StudyActionOut,
    StudyCreate,
    StudyDetail,
    StudyOut,
    StudyPage,
    StudyPreset,
    StudyProgress,
    StudySeries,
)

router = APIRouter(prefix="/api/studies", tags=["studies"], responses=ERROR_RESPONSES)

TargetQuery = Annotated[
    float | None,
    Query(
        ge=0,
        le=1e30,
        description="eval loss the time_to_target_s figure is measured to (training runs); omit for none",
    ),
]
BaselineQuery = Annotated[
    int | None,
    Query(
        ge=0, le=1_000_000, description="compare every cell with this cell (default: the study's baseline)"
    ),
]
FieldQuery = Annotated[str, Query(max_length=100, description=f"one of {', '.join(ROUND_FIELDS)}")]
SeriesXQuery = Annotated[SeriesX, Query(description="downsample along the round or the modeled elapsed time")]
MaxPointsQuery = Annotated[
    int, Query(ge=MIN_POINTS, le=MAX_POINTS, description="downsample each cell to at most this many points")
]
MethodQuery = Annotated[Method, Query(description="lttb (shape), minmax (extremes), mean (buckets), none")]
EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {
            media: {"schema": {"type": "string", "format": "binary"}} for media in export.MEDIA_TYPES.values()
        },
        "description": "the summary table (CSV, Parquet) or the report (HTML, plotly.js inlined)",
    }
}


@router.post("", status_code=status.HTTP_201_CREATED)
def create_study(
    body: StudyCreate,
    session: SessionDep,
    user: OperatorUser,
    wake: WakeDep,
    dispatcher: DispatcherDep,
    workspace: WorkspaceDep,
    settings: SettingsDep,
) -> StudyOut:
    """Check the whole study (one 422 naming every bad cell; nothing stored), then store it with all
    its runs queued; they are dispatched once this request commits, ``concurrency`` at a time. 409
    past your COLLAPIPE_MAX_ACTIVE_STUDIES_PER_USER or COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER."""
    study = service.create(session, user, body, wake, dispatcher, workspace, service.StudyCaps.of(settings))
    return summary.outs(session, [study])[0]


@router.get("")
def list_studies(
    session: SessionDep, _user: ViewerUser, search: Search = None, limit: Limit = 50, offset: Offset = 0
) -> StudyPage:
    """Studies, newest first, each with its progress."""
    items, total = service.page(session, search, limit, offset)
    return StudyPage(items=summary.outs(session, items), total=total, limit=limit, offset=offset)


@router.get("/presets")
def list_presets(_user: ViewerUser) -> list[StudyPreset]:
    """Ready-made studies ("paper comparison", "V sweep"): POST a preset's ``definition``."""
    return presets.presets()


@router.get("/{study_id}")
def get_study(
    study_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    target_eval_loss: TargetQuery = None,
    baseline_cell: BaselineQuery = None,
) -> StudyDetail:
    """The study's cells with their runs and, per figure, the mean and Student-t 95 % interval over
    the cell's seeds and the ratio to the baseline cell; ``last_event_id`` for its event stream."""
    return summary.detail(session, service.get(session, study_id), target_eval_loss, baseline_cell)


@router.get("/{study_id}/series")
def get_study_series(
    study_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    field: FieldQuery = "eval_loss",
    x: SeriesXQuery = "round",
    max_points: MaxPointsQuery = 2000,
    method: MethodQuery = "lttb",
) -> StudySeries:
    """Per cell, the mean over its runs (seeds) of a round field at each round every run of the cell
    has, with the mean modeled elapsed time (Σ latency_s) there, downsampled; the cell's label and values."""
    series.check_field(field)  # before the study is read: a bad field is a 422 whatever the study
    return series.study_series(session, service.get(session, study_id), field, x, max_points, method)


@router.post("/{study_id}/cancel")
def cancel_study(study_id: IdPath, session: SessionDep, user: OperatorUser, wake: WakeDep) -> StudyActionOut:
    """Every unfinished run: queued ones are cancelled at once, running ones stop after their round.
    The study's owner or an admin only."""
    changed = service.cancel(session, user, study_id, wake)
    return StudyActionOut(study=_out(session, study_id), runs_changed=changed)


@router.post("/{study_id}/resume")
def resume_study(
    study_id: IdPath,
    session: SessionDep,
    user: OperatorUser,
    wake: WakeDep,
    dispatcher: DispatcherDep,
    settings: SettingsDep,
) -> StudyActionOut:
    """Every failed or cancelled run is queued again and continues from its last checkpoint. The
    study's owner or an admin only, within the owner's COLLAPIPE_MAX_ACTIVE_RUNS_PER_USER."""
    changed = service.resume(session, user, study_id, wake, dispatcher, settings.max_active_runs_per_user)
    return StudyActionOut(study=_out(session, study_id), runs_changed=changed)


def _out(session: Session, study_id: int) -> StudyOut:
    session.flush()
    return summary.outs(session, [service.get(session, study_id)])[0]


@router.get("/{study_id}/export", response_class=Response, responses=EXPORT_RESPONSES)
def export_study(
    study_id: IdPath,
    session: SessionDep,
    _user: ViewerUser,
    format: Annotated[ExportFormat, Query(description="csv, parquet or html")] = "csv",
    target_eval_loss: TargetQuery = None,
    baseline_cell: BaselineQuery = None,
) -> Response:
    """The summary table (one row per cell) as CSV or Parquet, or the study as a self-contained HTML
    report that reads like its page: the table, the figures and the round series (plotly.js inlined: it
    opens offline)."""
    body = export.export(session, service.get(session, study_id), format, target_eval_loss, baseline_cell)
    filename = f"study-{study_id}.{format}"
    return Response(
        body,
        media_type=export.MEDIA_TYPES[format],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/{study_id}/events", response_class=StreamingResponse, responses=SSE_RESPONSE)
async def study_events(
    study_id: IdPath,
    request: Request,
    channel: ChannelDep,
    settings: SettingsDep,
    access: StreamViewer,
    last_event_id: LastEventIdHeader = None,
    after: AfterQuery = None,
) -> Response:
    """The ``status`` and (compact: run, round, latency, eval loss) ``round`` events of the study's
    runs from the start (or after Last-Event-ID), each batch followed by an ``event: study`` (no id)
    with the study's progress; the stream ends when every run is finished (204 if nothing is left)."""
    factory: SessionFactory = request.app.state.session_factory
    run_ids = frozenset(await to_thread.run_sync(_run_ids, factory, study_id))

    async def is_finished() -> bool:
        state = await to_thread.run_sync(_progress, factory, study_id)
        return state.runs_done == state.runs_total

    async def progress_frame() -> str:
        state = await to_thread.run_sync(_progress, factory, study_id)
        return f"event: study\ndata: {state.model_dump_json()}\n\n"

    start = resume_point(channel, last_event_id, after)
    return await event_stream(
        channel,
        run_ids,
        start,
        settings.sse_heartbeat_s,
        is_finished,
        access,
        shape=compact,
        after_batch=progress_frame,
    )


def _run_ids(factory: SessionFactory, study_id: int) -> list[int]:
    with factory() as session:
        return service.run_ids(session, study_id)


def _progress(factory: SessionFactory, study_id: int) -> StudyProgress:
    with factory() as session:
        return summary.progress_of(session, study_id)
