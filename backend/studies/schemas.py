"""Request and response bodies of studies."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue, model_validator

from backend.metrics.downsample import Method
from backend.params import MAX_ID
from backend.request_body import Integral, StrictBody
from backend.runs.schemas import RunStatus
from backend.text_input import StoredStr

MAX_BASES = 20
MAX_AXES = 10
MAX_AXIS_VALUES = 1000
FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$"

StudyMode = Literal["grid", "zip"]
StudyStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
ExportFormat = Literal["csv", "parquet", "html"]
SeriesX = Literal["round", "elapsed"]


class StudyBase(StrictBody):
    """A base config: inline or a saved experiment's, with the name its cells show."""

    name: StoredStr | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="the base's name in the cells (default: the config's or the experiment's name); "
        "unique within the study",
    )
    config: dict[str, Any] | None = Field(
        default=None, description="an inline experiment config; schema at GET /api/config/schema"
    )
    experiment_id: Integral | None = Field(default=None, ge=1, le=MAX_ID, description="or a saved experiment")

    @model_validator(mode="after")
    def _one_source(self) -> StudyBase:
        if (self.experiment_id is None) == (self.config is None):
            raise ValueError("give exactly one of experiment_id and config")
        return self


class StudyAxis(StrictBody):
    field: StoredStr = Field(
        min_length=1,
        max_length=200,
        pattern=FIELD_PATH,
        description="a dotted config field path (scheduler.V, network.cpu_hz.low); 'seed' repeats every "
        "cell over seeds (a cell's summary is the mean over its seeds)",
    )
    values: list[JsonValue] = Field(
        min_length=1, max_length=MAX_AXIS_VALUES, description="the field's values"
    )


class RegimeAxes(StrictBody):
    """The two axes a regime map is drawn against (docs/studies.md, "Regime map")."""

    x: StoredStr = Field(
        min_length=1,
        max_length=200,
        pattern=FIELD_PATH,
        description="the axis across (e.g. channel.bandwidth_hz)",
    )
    y: StoredStr = Field(
        min_length=1,
        max_length=200,
        pattern=FIELD_PATH,
        description="the axis up (e.g. network.memory_bytes)",
    )


class StudyCreate(StrictBody):
    name: StoredStr = Field(min_length=1, max_length=200)
    bases: list[StudyBase] = Field(
        min_length=1,
        max_length=MAX_BASES,
        description="base configs; several (e.g. two scenarios whose model and data differ) form an "
        "outermost axis named 'base'",
    )
    axes: list[StudyAxis] = Field(default_factory=list, max_length=MAX_AXES)
    mode: StudyMode = Field(
        default="grid", description="grid: every combination of the axes' values; zip: row i of every axis"
    )
    concurrency: Integral = Field(default=4, ge=1, le=1000, description="most runs of the study at once")
    baseline: dict[str, JsonValue] | None = Field(
        default=None,
        max_length=MAX_AXES + 1,
        description="the baseline of each cell's ratios, by axis values ('base' names a base): "
        '{"scheduler.policy": "uniform"} compares every cell with the uniform cell of its base and '
        "other values",
    )
    regime_map: RegimeAxes | None = Field(
        default=None,
        description="draw DSSDA against the best budget-holding baseline at every point of two axes: both "
        "must be axes of the study, and a scheduler.policy axis must list dssda and at least one baseline",
    )

    @model_validator(mode="after")
    def _regime_axes(self) -> StudyCreate:
        if self.regime_map is None:
            return self
        fields = [a.field for a in self.axes]
        choices = sorted(f for f in fields if f not in ("seed", "scheduler.policy"))
        for name, field in (("x", self.regime_map.x), ("y", self.regime_map.y)):
            if field not in choices:
                raise ValueError(
                    f"regime_map.{name} = {field!r} is not an axis of the study the map can be drawn "
                    f"against; choose one of {choices} (not seed or scheduler.policy)"
                )
        if self.regime_map.x == self.regime_map.y:
            raise ValueError("regime_map.x and regime_map.y name the same axis; give two different axes")
        policies = next((a.values for a in self.axes if a.field == "scheduler.policy"), [])
        if "dssda" not in policies or len(policies) < 2:
            raise ValueError(
                "regime_map compares dssda with baselines: add an axis scheduler.policy listing dssda and "
                f"at least one baseline (it lists {policies})"
            )
        return self


class StudyProgress(BaseModel):
    status: StudyStatus = Field(
        description="derived from the runs: running while any runs or waits among finished ones; "
        "succeeded when all did; else failed if any failed, else cancelled; queued before any started"
    )
    runs_total: int
    runs_done: int = Field(description="runs that succeeded, failed or were cancelled")
    runs_by_status: dict[str, int]
    rounds_done: int
    rounds_total: int


class StudyOut(BaseModel):
    id: int
    name: str
    owner_id: int | None
    owner_name: str | None
    created_at: datetime
    mode: StudyMode
    concurrency: int
    num_cells: int
    progress: StudyProgress


class StudyPage(BaseModel):
    items: list[StudyOut]
    total: int
    limit: int
    offset: int


class MetricSummary(BaseModel):
    mean: float | None = Field(description="mean over the cell's runs that have the figure")
    ci95_low: float | None = Field(description="Student-t 95 % interval of the mean (null below 2 runs)")
    ci95_high: float | None
    n: int = Field(description="runs the mean is over")


class MetricInfo(BaseModel):
    name: str
    unit: str
    description: str


class StudyCellRun(BaseModel):
    id: int
    seed: int
    status: RunStatus
    rounds_done: int
    total_rounds: int
    error: str | None


class StudyCell(BaseModel):
    index: int
    base: str
    values: dict[str, JsonValue] = Field(description="the cell's axis values (seed excluded)")
    label: str
    runs: list[StudyCellRun]
    metrics: dict[str, MetricSummary]
    baseline_cell: int | None = Field(description="the cell the ratios are against (null: none)")
    ratios: dict[str, float | None] = Field(description="metric mean / the baseline cell's")


class RegimeBaseline(BaseModel):
    policy: str
    cell: int
    mean_latency_s: float | None = Field(description="mean over the cell's runs")
    holds: bool | None = Field(
        description="every run keeps each device's time-average energy within its budget and its modeled "
        "memory within its capacity (null: no run has rounds yet)"
    )


class RegimePoint(BaseModel):
    panel: int = Field(description="index into panels")
    x: int = Field(description="index into x_values")
    y: int = Field(description="index into y_values")
    dssda_cell: int | None
    devices_holding_blocks: float | None = Field(
        description="DSSDA's devices holding blocks per cluster (mean)"
    )
    microbatches: float | None = Field(description="DSSDA's micro-batches M (mean over rounds and clusters)")
    annotation: str = Field(description="the point's text on the map: devices and M")
    dssda_latency_s: float | None
    dssda_holds: bool | None
    best_baseline: str | None = Field(
        description="the budget holder with the least mean latency (null: none)"
    )
    best_baseline_cell: int | None
    best_baseline_latency_s: float | None
    latency_ratio: float | None = Field(
        description="DSSDA's mean latency / the best budget holder's; with a fixed batch also the ratio of "
        "the times to a target loss"
    )
    memory_ratio_to_fl: float | None = Field(description="DSSDA's peak device memory / fl's")
    baselines: list[RegimeBaseline]
    summary: str = Field(description="the point in a sentence: DSSDA's latency against every baseline's")


class RegimeMap(BaseModel):
    x_field: str
    y_field: str
    x_values: list[JsonValue]
    x_labels: list[str]
    y_values: list[JsonValue]
    y_labels: list[str]
    panels: list[str] = Field(description='one map per base and value of the other axes ("": the only one)')
    fixed_batch: bool = Field(
        description="every run trains a fixed batch (training.batch_size): all policies train the same "
        "samples per round, so latency_ratio is the ratio of the times to a target loss"
    )
    note: str = Field(description="how to read the map, in a paragraph")
    points: list[RegimePoint]


class FigureAxis(BaseModel):
    field: str = Field(description="an axis whose value differs between cells, or 'base' (the study's bases)")
    numeric: bool = Field(
        description="every value is a number: a line per group of cells with its 95 % interval as a band; "
        "otherwise a bar per value with 95 % whiskers"
    )
    log: bool = Field(description="drawn on a log scale: positive numbers spanning 100× or more")


class StudyDetail(StudyOut):
    definition: dict[str, Any] = Field(description="the study as submitted (bases, axes, mode, baseline)")
    axes: list[str] = Field(description="the axes whose value differs between cells (seed excluded)")
    overrides: dict[str, JsonValue] = Field(
        description="the axes set to one value in every cell (e.g. training.rounds), with that value"
    )
    figure_axes: list[FigureAxis] = Field(
        description="what a figure can be drawn against: the varying axes and 'base' with several bases; "
        "the first is drawn at first (the last axis of numbers, else the last axis)"
    )
    trains: bool = Field(
        description="some run trains a model (its executor is not analytic): eval losses, a target to reach"
    )
    series_field: str = Field(
        description="the round field the round series show at first: eval_loss when runs train, else "
        "latency_s"
    )
    seeds: list[int]
    target_eval_loss: float | None
    metrics: list[MetricInfo]
    cells: list[StudyCell]
    regime_map: RegimeMap | None = Field(
        default=None, description="DSSDA against the best budget-holding baseline over two axes, if asked"
    )
    last_event_id: str = Field(
        description="the live head when the study was read: GET /api/studies/{id}/events?after=<it>"
    )


class CellSeries(BaseModel):
    index: int
    base: str
    values: dict[str, JsonValue] = Field(description="the cell's axis values (seed excluded)")
    label: str
    num_runs: int = Field(description="the cell's runs (its seeds): the mean is over all of them")
    num_points: int = Field(description="rounds every run of the cell has a value at, before downsampling")
    round: list[float] = Field(description="round index (a bucket's mean round with method=mean)")
    value: list[float] = Field(description="mean over the cell's runs of the field at the round")
    elapsed_s: list[float] = Field(
        description="mean over the cell's runs of the modeled elapsed time at the end of the round "
        "(Σ latency_s up to it, as GET /api/runs/{id}/rounds gives)"
    )


class StudySeries(BaseModel):
    study_id: int
    field: str
    unit: str
    x: SeriesX = Field(description="what the series were downsampled along: the round or the elapsed time")
    method: Method
    max_points: int
    fields: list[str] = Field(description="every round field this endpoint takes")
    cells: list[CellSeries]


class StudyActionOut(BaseModel):
    study: StudyOut
    runs_changed: int = Field(
        description="cancel: runs cancelled now or asked to stop after their round; resume: runs queued again"
    )


class StudyPreset(BaseModel):
    name: str
    description: str
    definition: dict[str, Any] = Field(description="a body for POST /api/studies")
    rounds: int | None = Field(description="the rounds per run the preset is written for")
    fewer_rounds: str = Field(description="what the preset's runs cut to fewer rounds cannot show, and why")
