"""A study's summary table as CSV or Parquet, and the study as a self-contained HTML report
(``backend.studies.report``).

One row per cell: its index, label, base and the values of its axes and overrides, its runs, then per
figure the mean, the 95 % interval and the ratio to the baseline cell.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from backend.db.models import Study
from backend.metrics.export import to_csv, to_parquet
from backend.studies import series, summary
from backend.studies.schemas import ExportFormat, StudyDetail

MEDIA_TYPES: dict[str, str] = {
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
    "html": "text/html; charset=utf-8",
}


def _fields(study: StudyDetail) -> list[str]:
    return [*study.axes, *study.overrides]


def table(study: StudyDetail) -> tuple[list[dict[str, Any]], list[str]]:
    """The summary rows and their columns, in order."""
    fields = _fields(study)
    columns = ["cell", "label", "base", *fields, "runs", "runs_succeeded"]
    for metric in study.metrics:
        columns += [
            metric.name,
            f"{metric.name}_ci95_low",
            f"{metric.name}_ci95_high",
            f"{metric.name}_ratio",
        ]
    rows = []
    for cell in study.cells:
        row: dict[str, Any] = {
            "cell": cell.index,
            "label": cell.label,
            "base": cell.base,
            **{field: _scalar(cell.values.get(field)) for field in fields},
            "runs": len(cell.runs),
            "runs_succeeded": sum(r.status == "succeeded" for r in cell.runs),
        }
        for metric in study.metrics:
            summary_ = cell.metrics.get(metric.name)
            row[metric.name] = summary_.mean if summary_ else None
            row[f"{metric.name}_ci95_low"] = summary_.ci95_low if summary_ else None
            row[f"{metric.name}_ci95_high"] = summary_.ci95_high if summary_ else None
            row[f"{metric.name}_ratio"] = cell.ratios.get(metric.name)
        rows.append(row)
    return rows, columns


def _scalar(value: Any) -> Any:
    """An axis value as a table cell: numbers and text as they are, anything else as JSON text."""
    return value if value is None or isinstance(value, (int, float, str, bool)) else json.dumps(value)


def export(
    session: Session,
    study: Study,
    fmt: ExportFormat,
    target_eval_loss: float | None,
    baseline_cell: int | None,
) -> bytes:
    detail = summary.detail(session, study, target_eval_loss, baseline_cell)
    if fmt == "html":
        from backend.studies import report  # plotly: imported when a report is asked for

        drawn = series.study_series(
            session, study, detail.series_field, "round", report.SERIES_POINTS, "lttb"
        )
        return report.report(detail, drawn, baseline_cell).encode()
    rows, columns = table(detail)
    if fmt == "csv":
        return to_csv(rows, columns)
    # one type per column: axis values may mix numbers and text across cells
    fields = set(_fields(detail))
    typed = [
        {
            c: (json.dumps(v) if c in fields and not isinstance(v, (int, float)) and v is not None else v)
            for c, v in r.items()
        }
        for r in rows
    ]
    return to_parquet(typed, columns)
