"""A study's summary table as CSV or Parquet, and as a self-contained HTML report.

One row per cell: its index, base and axis values, its runs, then per figure the mean, the 95 %
interval and the ratio to the baseline cell. The report inlines plotly.js (from the plotly package):
it opens offline and makes no outside request.
"""

from __future__ import annotations

import html
import json
from typing import Any

from backend.metrics.export import to_csv, to_parquet
from backend.studies.schemas import ExportFormat, StudyDetail

MEDIA_TYPES: dict[str, str] = {
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
    "html": "text/html; charset=utf-8",
}


def table(study: StudyDetail) -> tuple[list[dict[str, Any]], list[str]]:
    """The summary rows and their columns, in order."""
    columns = ["cell", "label", "base", *study.axes, "runs", "runs_succeeded"]
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
            **{axis: _scalar(cell.values.get(axis)) for axis in study.axes},
            "runs": len(cell.runs),
            "runs_succeeded": sum(r.status == "succeeded" for r in cell.runs),
        }
        for metric in study.metrics:
            summary = cell.metrics.get(metric.name)
            row[metric.name] = summary.mean if summary else None
            row[f"{metric.name}_ci95_low"] = summary.ci95_low if summary else None
            row[f"{metric.name}_ci95_high"] = summary.ci95_high if summary else None
            row[f"{metric.name}_ratio"] = cell.ratios.get(metric.name)
        rows.append(row)
    return rows, columns


def _scalar(value: Any) -> Any:
    """An axis value as a table cell: numbers and text as they are, anything else as JSON text."""
    return value if value is None or isinstance(value, (int, float, str, bool)) else json.dumps(value)


def export(study: StudyDetail, fmt: ExportFormat) -> bytes:
    if fmt == "html":
        return report(study).encode()
    rows, columns = table(study)
    if fmt == "csv":
        return to_csv(rows, columns)
    # one type per column: axis values may mix numbers and text across cells
    typed = [
        {
            c: (json.dumps(v) if c in study.axes and not isinstance(v, (int, float)) and v is not None else v)
            for c, v in r.items()
        }
        for r in rows
    ]
    return to_parquet(typed, columns)


# -- the HTML report ------------------------------------------------------------------------------


def _x_axis(study: StudyDetail) -> str | None:
    """The axis to draw figures against: the last one whose values are all numbers (e.g. V)."""
    for axis in reversed(study.axes):
        values = [cell.values.get(axis) for cell in study.cells]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return axis
    return None


def _figures(study: StudyDetail) -> list[Any]:
    """One figure per metric: the cells' means with their 95 % intervals as error bars, against the
    numeric axis (one line per combination of the other axes), or one bar per cell."""
    import plotly.graph_objects as go

    x_axis = _x_axis(study)
    out = []
    for metric in study.metrics:
        cells = [
            c for c in study.cells if c.metrics.get(metric.name) and c.metrics[metric.name].mean is not None
        ]
        if not cells:
            continue
        figure = go.Figure()
        groups: dict[str, list[Any]] = {}
        for cell in cells:
            key = (
                cell.label
                if x_axis is None
                else ", ".join(
                    [cell.base] * (len({c.base for c in study.cells}) > 1)
                    + [
                        f"{a.rsplit('.', 1)[-1]}={json.dumps(v)}"
                        for a, v in cell.values.items()
                        if a != x_axis
                    ]
                )
            )
            groups.setdefault(key or metric.name, []).append(cell)
        for key, members in groups.items():
            name = plot_text(key)
            means = [c.metrics[metric.name].mean for c in members]
            upper = [_gap(c.metrics[metric.name].ci95_high, c.metrics[metric.name].mean) for c in members]
            lower = [_gap(c.metrics[metric.name].mean, c.metrics[metric.name].ci95_low) for c in members]
            error = {"type": "data", "array": upper, "arrayminus": lower, "visible": True}
            if x_axis is None:
                figure.add_trace(go.Bar(x=[name], y=means, name=name, error_y=error))
            else:
                x = [c.values[x_axis] for c in members]
                figure.add_trace(go.Scatter(x=x, y=means, name=name, mode="lines+markers", error_y=error))
        figure.update_layout(
            title=plot_text(f"{metric.name} ({metric.unit}): mean and 95 % interval over seeds"),
            xaxis_title=plot_text(x_axis or "cell"),
            height=380,
        )
        if x_axis is not None and all(_positive(c.values[x_axis]) for c in cells):
            figure.update_xaxes(type="log")
        out.append(figure)
    return out


REGIME_COLORS = [[0.0, "#2166ac"], [0.5, "#f7f7f7"], [1.0, "#b2182b"]]  # below 1 blue: DSSDA faster


def _regime_figures(study: StudyDetail) -> list[Any]:
    """One heatmap per panel: colour DSSDA's latency over the best budget holder's, each cell
    annotated with DSSDA's devices holding blocks and M."""
    import plotly.graph_objects as go

    regime = study.regime_map
    if regime is None:
        return []
    out = []
    for index, panel in enumerate(regime.panels):
        shape = [[None] * len(regime.x_values) for _ in regime.y_values]
        z: list[list[float | None]] = [list(row) for row in shape]
        text: list[list[str | None]] = [list(row) for row in shape]
        hover: list[list[str | None]] = [list(row) for row in shape]
        for p in regime.points:
            if p.panel == index:
                z[p.y][p.x], text[p.y][p.x], hover[p.y][p.x] = (
                    p.latency_ratio,
                    plot_text(p.annotation),
                    plot_text(p.summary),
                )
        figure = go.Figure(
            go.Heatmap(
                x=[plot_text(label) for label in regime.x_labels],
                y=[plot_text(label) for label in regime.y_labels],
                z=z,
                text=text,
                customdata=hover,
                texttemplate="%{text}",
                hovertemplate="%{x}, %{y}: ×%{z:.3g}<br>%{customdata}<extra></extra>",
                colorscale=REGIME_COLORS,
                zmid=1.0,
                colorbar={"title": {"text": "DSSDA / best holder"}},
                name="regime-map",
            )
        )
        title = "regime map: DSSDA's latency / the best budget holder's" + (f" ({panel})" if panel else "")
        figure.update_layout(
            title=plot_text(title),
            xaxis={"title": {"text": plot_text(regime.x_field)}, "type": "category"},
            yaxis={"title": {"text": plot_text(regime.y_field)}, "type": "category"},
            height=120 + 70 * len(regime.y_values),
        )
        out.append(figure)
    return out


def plot_text(text: str) -> str:
    """``text`` as plotly.js shows it as it is: it renders a subset of HTML (<a href>, <b>, <br>, ...)
    in trace names, legends, titles, tick and hover labels; its entities as the characters. Every
    name, label and axis value a chart gets goes through this."""
    return html.escape(text, quote=False)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 0


def _gap(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def report(study: StudyDetail) -> str:
    """The study as one HTML page: its definition, the summary table and a figure per metric."""
    import plotly.offline

    rows, columns = table(study)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_format(row[c])}</td>" for c in columns) + "</tr>" for row in rows)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(study.name)} (study {study.id})</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style>",
        f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script>",
        "</head><body>",
        f"<h1>{html.escape(study.name)}</h1>",
        f"<p>Study {study.id}: {study.num_cells} cells × seeds {html.escape(str(study.seeds))}, "
        f"{study.progress.runs_done} of {study.progress.runs_total} runs done ({study.progress.status}). "
        "Each figure is the mean over the cell's seeds with its Student-t 95 % interval; ratios are "
        "against each cell's baseline cell.</p>",
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
    ]
    if study.regime_map is not None:
        parts += ["<h2>Regime map</h2>", f"<p>{html.escape(study.regime_map.note)}</p>"]
        parts += [f.to_html(full_html=False, include_plotlyjs=False) for f in _regime_figures(study)]
    parts += [figure.to_html(full_html=False, include_plotlyjs=False) for figure in _figures(study)]
    definition = json.dumps(study.definition, indent=2, default=str)
    parts += ["<h2>Definition</h2>", f"<pre>{html.escape(definition)}</pre>", "</body></html>"]
    return "\n".join(parts)
