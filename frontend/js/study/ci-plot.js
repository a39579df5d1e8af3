// One figure of a study against one axis: the mean over seeds per cell as a line, its Student-t 95 %
// interval as a band, one line per group of cells that share every other axis value (and base).

import { axisFormat } from '../format.js';
import { PLOT_CONFIG, baseLayout, plotText, plotly } from '../plot.js';

const COLORS = ['#1f6fb2', '#d1495b', '#2a9d8f', '#e9a23b', '#6a4c93', '#5c677d'];

/** The axes whose cells differ by a value of more than one. */
function varyingAxes(detail) {
  return detail.axes.filter((axis) => new Set(detail.cells.map((c) => JSON.stringify(c.values[axis]))).size > 1);
}

/** The varying axes whose values are all numbers: those a figure can be drawn against. */
export function numericAxes(detail) {
  return varyingAxes(detail).filter((axis) => detail.cells.every((c) => typeof c.values[axis] === 'number'));
}

/** Groups of cells sharing the base and every axis but ``axis``: [{name, cells sorted by the axis}]. */
function groups(detail, axis) {
  const byKey = new Map();
  const varying = new Set(varyingAxes(detail)); // an axis of one value (an override) names no group
  for (const cell of detail.cells) {
    const others = Object.entries(cell.values).filter(([k]) => k !== axis && varying.has(k))
      .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`); // a {low, high} range as JSON
    const name = [detail.cells.some((c) => c.base !== cell.base) ? cell.base : null, ...others].filter(Boolean).join(', ') || 'all';
    if (!byKey.has(name)) byKey.set(name, []);
    byKey.get(name).push(cell);
  }
  return [...byKey].map(([name, cells]) => ({ name, cells: cells.sort((a, b) => a.values[axis] - b.values[axis]) }));
}

function rgba(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}

/** Draw ``metric`` (a MetricInfo) against ``axis`` into ``el``; returns the number of means drawn. */
export function drawCiPlot(el, detail, metric, axis) {
  const traces = [];
  let points = 0;
  groups(detail, axis).forEach((group, i) => {
    const color = COLORS[i % COLORS.length];
    const x = group.cells.map((c) => c.values[axis]);
    const at = (key) => group.cells.map((c) => c.metrics[metric.name]?.[key] ?? null);
    const mean = at('mean');
    const low = at('ci95_low').map((v, j) => v ?? mean[j]);
    const high = at('ci95_high').map((v, j) => v ?? mean[j]);
    points += mean.filter((v) => v !== null).length;
    traces.push(
      { x, y: low, mode: 'lines', line: { width: 0, color }, hoverinfo: 'skip', showlegend: false, meta: { band: 'low' } },
      { x, y: high, mode: 'lines', line: { width: 0, color }, fill: 'tonexty', fillcolor: rgba(color, 0.18),
        hoverinfo: 'skip', showlegend: false, meta: { band: 'high' } },
      { x, y: mean, mode: 'lines+markers', name: plotText(group.name), line: { color, width: 2 }, marker: { size: 6 },
        customdata: group.cells.map((c, j) => [low[j], high[j]]),
        hovertemplate: `${plotText(axis)}=%{x}<br>${metric.name} %{y}<br>95 %: %{customdata[0]} … %{customdata[1]}<extra>%{fullData.name}</extra>`,
        meta: { mean: true } },
    );
  });
  const xs = detail.cells.map((c) => c.values[axis]).filter((v) => typeof v === 'number');
  const logX = xs.length > 1 && Math.min(...xs) > 0 && Math.max(...xs) / Math.min(...xs) >= 100;
  const layout = baseLayout({
    showlegend: traces.length > 3,
    margin: { l: 70, r: 12, t: 28, b: 44 },
    xaxis: { title: { text: plotText(axis) }, type: logX ? 'log' : 'linear', gridcolor: '#eef1f5', zeroline: false, automargin: true },
    yaxis: { title: { text: metric.unit === '1' ? metric.name : `${metric.name} (${metric.unit})` },
      gridcolor: '#eef1f5', zeroline: false, automargin: true, ...axisFormat(metric.unit) },
  });
  plotly().react(el, traces, layout, PLOT_CONFIG);
  el.dataset.points = String(points);
  return points;
}
