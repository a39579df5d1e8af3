"""A study as one self-contained HTML page that reads like its page in the dashboard: what was run in
words, the regime map, the summary table (mean ± the half width of the 95 % interval with units, the
ratio under it), every figure against the axis the page draws first, and the round series per cell.
plotly.js is inlined (from the plotly package): the report opens offline and makes no outside request."""

from __future__ import annotations

import html
from typing import Any

import plotly.offline

from backend.studies.numbers import format_ratio, mean_with_interval
from backend.studies.report_figures import figure_against, regime_figures, series_figure, value_text
from backend.studies.schemas import StudyDetail, StudySeries

SERIES_POINTS = 500  # per cell: the page asks for as many
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#1b2430;max-width:1200px}"
    ".wrap{overflow-x:auto}table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #d6dbe1;padding:3px 8px;text-align:right;white-space:nowrap}"
    "th[scope=row]{text-align:left}.muted{color:#5c677d}.small{font-size:11px}"
    ".pill{font-size:10px;border:1px solid #5c677d;border-radius:8px;padding:0 5px;margin-left:4px}"
)


def _e(text: Any) -> str:
    return html.escape(str(text))


def _seeds(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds)) or "none"


def _definition(study: StudyDetail, baseline_cell: int | None) -> str:
    """What was run, in words: bases, axes and their values, the overrides, the baseline."""
    bases = [str(b.get("name")) for b in study.definition.get("bases", [])]
    items = [f"{'Bases' if len(bases) > 1 else 'Base'}: {_e(', '.join(bases))}"]
    axes = [a for a in study.definition.get("axes", []) if a["field"] not in study.overrides]
    if axes:
        text = "; ".join(f"{a['field']}: {', '.join(value_text(v) for v in a['values'])}" for a in axes)
        mode = " (zip: row i of every axis)" if study.mode == "zip" else ""
        items.append(f"Axes: {_e(text)}{mode}")
    if study.overrides:
        text = "; ".join(f"{field} = {value_text(v)}" for field, v in study.overrides.items())
        items.append(f"Every cell: {_e(text)}")
    baseline = study.definition.get("baseline")
    if baseline_cell is not None:
        items.append(f"Ratios against: the cell {_e(study.cells[baseline_cell].label)}")
    elif baseline:
        items.append(
            f"Ratios against: {_e('; '.join(f'{k} = {value_text(v)}' for k, v in baseline.items()))}"
        )
    return "<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def _table(study: StudyDetail) -> str:
    """The page's summary table: a row per cell, per figure with a mean the mean ± its interval."""
    metrics = [
        m
        for m in study.metrics
        if any((s := c.metrics.get(m.name)) and s.mean is not None for c in study.cells)
    ]
    head = "<th>Cell</th><th>Runs ok</th>" + "".join(
        f"<th scope='col' title='{_e(m.description)}'>{_e(m.name)}"
        + (f" <span class='muted'>({_e(m.unit)})</span>" if m.unit != "1" else "")
        + "</th>"
        for m in metrics
    )
    rows = []
    for cell in study.cells:
        is_baseline = cell.baseline_cell == cell.index
        ok = sum(r.status == "succeeded" for r in cell.runs)
        values = []
        for m in metrics:
            s = cell.metrics.get(m.name)
            text = mean_with_interval(s.mean, s.ci95_low, s.ci95_high, m.unit) if s else "—"
            ratio = cell.ratios.get(m.name)
            under = (
                f"<div class='small muted'>{format_ratio(ratio)}</div>"
                if ratio is not None and cell.baseline_cell is not None and not is_baseline
                else ""
            )
            values.append(f"<td>{_e(text)}{under}</td>")
        pill = "<span class='pill'>baseline</span>" if is_baseline else ""
        label = f"<th scope='row'>{_e(cell.label)}{pill}</th>"
        rows.append(f"<tr>{label}<td>{ok}/{len(cell.runs)}</td>{''.join(values)}</tr>")
    return (
        f"<div class='wrap'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _chart(figure: Any) -> str:
    return str(figure.to_html(full_html=False, include_plotlyjs=False))


def report(study: StudyDetail, series: StudySeries, baseline_cell: int | None) -> str:
    """The study as one HTML page (``series``: its round series of ``study.series_field``;
    ``baseline_cell``: the cell the ratios were asked against, None for the study's own baseline)."""
    p = study.progress
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_e(study.name)} (study {study.id})</title>",
        f"<style>{STYLE}</style>",
        f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script>",
        "</head><body>",
        f"<h1>{_e(study.name)}</h1>",
        f"<p>Study {study.id}: {study.num_cells} cells × seeds {_e(_seeds(study.seeds))}, {p.runs_done} of "
        f"{p.runs_total} runs done ({_e(p.status)}), {p.rounds_done} of {p.rounds_total} rounds.</p>",
        _definition(study, baseline_cell),
    ]
    if study.regime_map is not None:
        parts += ["<h2>Regime map</h2>", f"<p>{_e(study.regime_map.note)}</p>"]
        parts += [_chart(f) for f in regime_figures(study)]
    parts += [
        "<h2>Summary per cell</h2>",
        "<p class='muted'>Mean over the cell's seeds ± the half width of its Student-t 95 % interval; × is "
        "the ratio of the mean to the baseline cell's.</p>",
        _table(study),
    ]
    if study.figure_axes:
        axis = study.figure_axes[0]
        drawn = [f for m in study.metrics if (f := figure_against(study, m, axis)) is not None]
        how = (
            "a line per group with its 95 % interval as a band" if axis.numeric else "bars with 95 % whiskers"
        )
        parts += [f"<h2>Figures against {_e(axis.field)}</h2>", f"<p class='muted'>Each figure: {how}.</p>"]
        parts += [_chart(f) for f in drawn]
    figure = series_figure(series)
    parts += ["<h2>Round series per cell</h2>"]
    parts += (
        [_chart(figure)]
        if figure is not None
        else [f"<p class='muted'>No round of {_e(series.field)} that every run of a cell has yet.</p>"]
    )
    parts.append("</body></html>")
    return "\n".join(parts)
