"""The HTML report's figures, drawn as the study page draws them (frontend/js/study/): a figure against
the axis the page draws first (``StudyDetail.figure_axes``: a line with its 95 % band against an axis
of numbers, grouped bars with 95 % whiskers against any other), the round series per cell (a colour
per cell, a switch to a log y axis) and the regime map's heatmaps. Every name, label and axis value
reaches plotly.js through ``plot_text``."""

from __future__ import annotations

import html
import json
from typing import Any

import plotly.graph_objects as go

from backend.studies.grid import BASE
from backend.studies.schemas import FigureAxis, MetricInfo, StudyCell, StudyDetail, StudySeries

# plotly's palette up to 10 lines, then evenly spread hues (frontend/js/plot.js: deviceColor)
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
SI_AXIS_UNITS = ("s", "J", "W", "Hz", "bit/s")
MARKERS_UP_TO = 40  # points per line drawn with markers
REGIME_COLORS = [[0.0, "#2166ac"], [0.5, "#f7f7f7"], [1.0, "#b2182b"]]  # below 1 blue: DSSDA faster
LOG_Y_SWITCH = {
    "type": "buttons",
    "direction": "right",
    "x": 0.0,
    "xanchor": "left",
    "y": 1.12,
    "yanchor": "bottom",
    "buttons": [
        {"label": "linear y", "method": "relayout", "args": [{"yaxis.type": "linear"}]},
        {"label": "log y", "method": "relayout", "args": [{"yaxis.type": "log"}]},
    ],
}


def plot_text(text: str) -> str:
    """``text`` as plotly.js shows it as it is: it renders a subset of HTML (<a href>, <b>, <br>, ...)
    in trace names, legends, titles, tick and hover labels; its entities as the characters. Every
    name, label and axis value a chart gets goes through this."""
    return html.escape(text, quote=False)


def color(index: int, count: int) -> str:
    """A colour per line, distinct however many lines there are."""
    if count <= len(PALETTE):
        return PALETTE[index % len(PALETTE)]
    return f"hsl({round(index * 360 / count)}, 62%, {40 if index % 2 else 52}%)"


def _rgba(hex_or_hsl: str, alpha: float) -> str:
    if hex_or_hsl.startswith("hsl("):
        return f"hsla({hex_or_hsl[4:-1]}, {alpha})"
    n = int(hex_or_hsl[1:], 16)
    return f"rgba({(n >> 16) & 255},{(n >> 8) & 255},{n & 255},{alpha})"


def axis_format(unit: str) -> dict[str, str]:
    """Tick and hover formats of an axis in ``unit`` (frontend/js/format.js: axisFormat)."""
    if unit == "bytes":
        return {"ticksuffix": "B", "tickformat": ".3~s", "hoverformat": ".4~s"}
    if unit in SI_AXIS_UNITS:
        return {"ticksuffix": unit, "tickformat": ".3~s", "hoverformat": ".4~s"}
    return {"tickformat": ".3~g", "hoverformat": ".4~g"}


def _y_title(name: str, unit: str) -> str:
    return name if unit == "1" else f"{name} ({unit})"


def value_text(value: Any) -> str:
    """An axis value as text: text as it is, anything else as its JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _at(cell: StudyCell, field: str) -> Any:
    return cell.base if field == BASE else cell.values.get(field)


def _groups(study: StudyDetail, field: str) -> list[tuple[str, list[StudyCell]]]:
    """Groups of cells sharing the base and every varying axis but ``field``: (name, cells)."""
    several_bases = len({c.base for c in study.cells}) > 1
    groups: dict[str, list[StudyCell]] = {}
    for cell in study.cells:
        parts = [cell.base] if several_bases and field != BASE else []
        parts += [f"{a}={value_text(cell.values.get(a))}" for a in study.axes if a != field]
        groups.setdefault(", ".join(parts) or "all", []).append(cell)
    return list(groups.items())


def figure_against(study: StudyDetail, metric: MetricInfo, axis: FigureAxis) -> go.Figure | None:
    """``metric`` against ``axis`` as the page draws it; None when no cell has a mean of it."""
    if not any((s := c.metrics.get(metric.name)) is not None and s.mean is not None for c in study.cells):
        return None
    groups = _groups(study, axis.field)
    figure = go.Figure()
    for i, (name, cells) in enumerate(groups):
        line = color(i, len(groups))
        summaries = [c.metrics.get(metric.name) for c in cells]
        mean = [s.mean if s else None for s in summaries]
        low = [
            s.ci95_low if s and s.ci95_low is not None else m for s, m in zip(summaries, mean, strict=True)
        ]
        high = [
            s.ci95_high if s and s.ci95_high is not None else m for s, m in zip(summaries, mean, strict=True)
        ]
        if axis.numeric:
            order = sorted(range(len(cells)), key=lambda j: _at(cells[j], axis.field))
            x = [_at(cells[j], axis.field) for j in order]
            low, mean, high = ([v[j] for j in order] for v in (low, mean, high))
            band = {
                "mode": "lines",
                "line": {"width": 0, "color": line},
                "hoverinfo": "skip",
                "showlegend": False,
            }
            figure.add_trace(go.Scatter(x=x, y=low, meta={"band": "low"}, **band))
            figure.add_trace(
                go.Scatter(
                    x=x, y=high, meta={"band": "high"}, fill="tonexty", fillcolor=_rgba(line, 0.18), **band
                )
            )
            figure.add_trace(
                go.Scatter(
                    x=x, y=mean, name=plot_text(name), mode="lines+markers", line={"color": line, "width": 2}
                )
            )
        else:
            whiskers = {
                "type": "data",
                "array": [None if h is None or m is None else h - m for h, m in zip(high, mean, strict=True)],
                "arrayminus": [
                    None if lo is None or m is None else m - lo for lo, m in zip(low, mean, strict=True)
                ],
                "visible": True,
            }
            x = [plot_text(value_text(_at(c, axis.field))) for c in cells]
            figure.add_trace(go.Bar(x=x, y=mean, name=plot_text(name), marker_color=line, error_y=whiskers))
    figure.update_layout(
        title=plot_text(f"{metric.name}: mean over seeds with its 95 % interval"),
        xaxis={
            "title": {"text": plot_text(axis.field)},
            **({"type": "log"} if axis.log else {} if axis.numeric else {"type": "category"}),
        },
        yaxis={"title": {"text": _y_title(metric.name, metric.unit)}, **axis_format(metric.unit)},
        showlegend=len(groups) > 1,
        legend={"traceorder": "normal"},  # the groups' order (a band's fill would reverse it)
        height=380,
        **({} if axis.numeric else {"barmode": "group"}),
    )
    return figure


def series_figure(series: StudySeries) -> go.Figure | None:
    """One line per cell of the round series (None when no cell has a point yet)."""
    if not any(cell.value for cell in series.cells):
        return None
    figure = go.Figure()
    for i, cell in enumerate(series.cells):
        figure.add_trace(
            go.Scatter(
                x=cell.round,
                y=cell.value,
                name=plot_text(cell.label),
                mode="lines+markers" if len(cell.value) <= MARKERS_UP_TO else "lines",
                line={"color": color(i, len(series.cells)), "width": 2},
                marker={"size": 5},
            )
        )
    figure.update_layout(
        title=plot_text(f"round series per cell: {series.field}, mean over the cell's seeds"),
        xaxis={"title": {"text": "round"}},
        yaxis={"title": {"text": _y_title(series.field, series.unit)}, **axis_format(series.unit)},
        updatemenus=[LOG_Y_SWITCH],
        showlegend=True,
        height=420,
    )
    return figure


def regime_figures(study: StudyDetail) -> list[go.Figure]:
    """One heatmap per panel: colour DSSDA's latency over the best budget holder's, each cell
    annotated with DSSDA's devices holding blocks and M."""
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
