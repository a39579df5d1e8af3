// One figure of a study against one of its figure axes (GET /api/studies/{id} → figure_axes): against
// an axis of numbers, the mean over seeds per cell as a line and its Student-t 95 % interval as a band;
// against any other (policies, bases, memory ranges), a bar per value with 95 % whiskers. One line or
// one set of bars per group of cells that share the base and every other varying axis. The HTML report
// draws the same figures (backend/studies/report_figures.py).

import { axisFormat } from '../format.js';
import { PLOT_CONFIG, baseLayout, deviceColor, plotText, plotly } from '../plot.js';

export const BASE = 'base'; // the bases as an axis

/** A value as text: text as it is, anything else (a {low, high} range) as its JSON. */
export function valueText(value) {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function valueAt(cell, field) {
  return field === BASE ? cell.base : cell.values[field];
}

/** Groups of cells sharing the base and every varying axis but ``field``: [{name, cells}]. */
function groups(detail, field) {
  const byName = new Map();
  const severalBases = new Set(detail.cells.map((c) => c.base)).size > 1;
  for (const cell of detail.cells) {
    const parts = severalBases && field !== BASE ? [cell.base] : [];
    for (const axis of detail.axes) if (axis !== field) parts.push(`${axis}=${valueText(cell.values[axis])}`);
    const name = parts.join(', ') || 'all';
    if (!byName.has(name)) byName.set(name, []);
    byName.get(name).push(cell);
  }
  return [...byName].map(([name, cells]) => ({ name, cells }));
}

/** A colour with transparency: ``#rrggbb`` or ``hsl(h, s%, l%)``. */
function translucent(color, alpha) {
  if (color.startsWith('hsl(')) return `hsla(${color.slice(4, -1)}, ${alpha})`;
  const n = parseInt(color.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}

function summaries(cells, metric) {
  const at = (key) => cells.map((c) => c.metrics[metric.name]?.[key] ?? null);
  const mean = at('mean');
  return { mean, low: at('ci95_low').map((v, j) => v ?? mean[j]), high: at('ci95_high').map((v, j) => v ?? mean[j]) };
}

function lineTraces(group, color, axis, metric) {
  const cells = [...group.cells].sort((a, b) => valueAt(a, axis.field) - valueAt(b, axis.field));
  const x = cells.map((c) => valueAt(c, axis.field));
  const { mean, low, high } = summaries(cells, metric);
  return [
    { x, y: low, mode: 'lines', line: { width: 0, color }, hoverinfo: 'skip', showlegend: false, meta: { band: 'low' } },
    { x, y: high, mode: 'lines', line: { width: 0, color }, fill: 'tonexty', fillcolor: translucent(color, 0.18),
      hoverinfo: 'skip', showlegend: false, meta: { band: 'high' } },
    { x, y: mean, mode: 'lines+markers', name: plotText(group.name), line: { color, width: 2 }, marker: { size: 6 },
      customdata: cells.map((c, j) => [low[j], high[j]]),
      hovertemplate: `${plotText(axis.field)}=%{x}<br>${metric.name} %{y}<br>95 %: %{customdata[0]} … %{customdata[1]}<extra>%{fullData.name}</extra>`,
      meta: { mean: true } },
  ];
}

function barTrace(group, color, axis, metric) {
  const { mean, low, high } = summaries(group.cells, metric);
  return {
    type: 'bar',
    x: group.cells.map((c) => plotText(valueText(valueAt(c, axis.field)))),
    y: mean,
    name: plotText(group.name),
    marker: { color },
    error_y: { type: 'data', visible: true, array: high.map((h, j) => (h === null ? null : h - mean[j])),
      arrayminus: low.map((l, j) => (l === null ? null : mean[j] - l)) },
    customdata: group.cells.map((c, j) => [low[j], high[j]]),
    hovertemplate: `%{x}<br>${metric.name} %{y}<br>95 %: %{customdata[0]} … %{customdata[1]}<extra>%{fullData.name}</extra>`,
    meta: { mean: true },
  };
}

/** Draw ``metric`` (a MetricInfo) against ``axis`` (a FigureAxis) into ``el``; the number of means drawn. */
export function drawCiPlot(el, detail, metric, axis) {
  const drawn = groups(detail, axis.field);
  const traces = drawn.flatMap((group, i) => {
    const color = deviceColor(i, drawn.length);
    return axis.numeric ? lineTraces(group, color, axis, metric) : [barTrace(group, color, axis, metric)];
  });
  const points = traces.filter((t) => t.meta.mean).flatMap((t) => t.y).filter((v) => v !== null).length;
  const layout = baseLayout({
    showlegend: drawn.length > 1,
    margin: { l: 70, r: 12, t: 28, b: 44 },
    xaxis: { title: { text: plotText(axis.field) }, type: axis.log ? 'log' : axis.numeric ? 'linear' : 'category',
      gridcolor: '#eef1f5', zeroline: false, automargin: true },
    yaxis: { title: { text: metric.unit === '1' ? metric.name : `${metric.name} (${metric.unit})` },
      gridcolor: '#eef1f5', zeroline: false, automargin: true, ...axisFormat(metric.unit) },
    ...(axis.numeric ? {} : { barmode: 'group' }),
  });
  layout.legend = { ...layout.legend, traceorder: 'normal' }; // the groups' order (a band's fill would reverse it)
  plotly().react(el, traces, layout, PLOT_CONFIG);
  el.dataset.points = String(points);
  return points;
}
