// Shared plotly.js settings: offline (no links to plotly's cloud), quiet mode bar, readable fonts;
// the x axis a run's curves are drawn against (round or modeled elapsed time) and its control.

import { h } from './dom.js';
import { axisFormat } from './format.js';

export const PLOT_CONFIG = {
  responsive: true,
  displaylogo: false,
  showLink: false,
  showSendToCloud: false,
  showEditInChartStudio: false,
  modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d'],
};

/**
 * ``value`` as text plotly.js shows as it is. plotly.js renders a subset of HTML in trace names,
 * legends, titles, axis and tick labels and hover text (<a href>, <b>, <br>, ...): every string a user
 * chose (run, study and base names, cell labels, axis values) goes through this before it reaches
 * a chart, so `<a href="https://...">` is shown, never made a link. Its entities are shown as the
 * characters they stand for.
 */
export function plotText(value) {
  return String(value).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

const FONT = { family: 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif', size: 12, color: '#1b2430' };

export function baseLayout(extra = {}) {
  return {
    font: FONT,
    margin: { l: 58, r: 12, t: 8, b: 40 },
    paper_bgcolor: '#ffffff',
    plot_bgcolor: '#ffffff',
    hovermode: 'closest',
    showlegend: false,
    legend: { orientation: 'h', x: 0, y: 1.02, yanchor: 'bottom', font: { size: 11 } },
    xaxis: { title: { text: 'round' }, gridcolor: '#eef1f5', zeroline: false, automargin: true },
    yaxis: { gridcolor: '#eef1f5', zeroline: false, automargin: true },
    uirevision: 'keep',
    ...extra,
  };
}

/**
 * An axis of a chart that redraws for every live round: fixed margins (no automargin) and no
 * overflow check of tick labels. Both make plotly.js measure every tick label on each redraw,
 * which forces a layout of the page; together they were about a third of a live redraw.
 */
export function liveAxis(extra = {}) {
  return { gridcolor: '#eef1f5', zeroline: false, automargin: false, ticklabeloverflow: 'allow', tickangle: 0, ...extra };
}

export const MAX_TRACE_POINTS = 1000; // a chart is ~600 px wide; every point costs on each live redraw
const RECENT_POINTS = 200; // the newest points of a live series stay as they came

/**
 * Bound a live series before ``incoming`` more points are appended: once it would hold more than
 * ``max`` points, its older part (all but the newest RECENT_POINTS) is halved in place. The first
 * point (the start of the series) always stays; of each following pair of older points the one
 * farther from the point kept before it stays, so spikes survive.
 * The history of a run comes downsampled by the API (LTTB) the same way.
 */
export function thinTrace(trace, incoming = 0, max = MAX_TRACE_POINTS) {
  const older = trace.x.length - RECENT_POINTS;
  if (trace.x.length + incoming <= max || older < 2) return; // nothing older than the newest to halve
  const keep = [0];
  let last = trace.y[0];
  for (let i = 1; i < older; i += 2) {
    const j = i + 1 < older && Math.abs(trace.y[i + 1] - last) > Math.abs(trace.y[i] - last) ? i + 1 : i;
    keep.push(j);
    last = trace.y[j];
  }
  // customdata (a point's other x axis, see X_AXES) is thinned with x and y
  for (const key of ['x', 'y', 'customdata']) {
    const values = trace[key];
    if (Array.isArray(values)) trace[key] = keep.map((j) => values[j]).concat(values.slice(older));
  }
}

// -- the x axis of a run's curves ------------------------------------------------------------------

/**
 * What a run's curves can be drawn against, by the name of a series' list of x values
 * (GET /api/runs/{id}/rounds|devices): the round, or the modeled elapsed time at the end of the
 * round (Σ latency_s up to it: policies' rounds last different times). A drawn trace has the chosen
 * one as ``x`` and the other as ``customdata``, so switching swaps them and hover shows both.
 */
export const X_AXES = {
  round: { label: 'round', title: 'round', hover: 'round %{x} · %{customdata:.4~g} s modeled' },
  elapsed_s: { label: 'modeled time (s)', title: 'modeled elapsed time (s)', hover: '%{x:.4~g} s modeled · round %{customdata}' },
};
const X_AXIS_KEY = 'collapipe.xAxis'; // the choice, kept in localStorage across pages and reloads

/** The x axis chosen last (localStorage), 'round' at first. */
export function savedXAxis() {
  try {
    const axis = localStorage.getItem(X_AXIS_KEY);
    return Object.hasOwn(X_AXES, axis ?? '') ? axis : 'round';
  } catch {
    return 'round'; // storage refused (private mode, policy): the default
  }
}

/** The "X axis" select (``#x-axis``): calls ``onChange(axis)`` and keeps the choice. */
export function xAxisControl(axis, onChange) {
  const select = h('select', { id: 'x-axis', title: 'every curve of the page: per round or against the modeled elapsed time' },
    Object.entries(X_AXES).map(([value, { label }]) => h('option', { value }, label)));
  select.value = axis;
  select.addEventListener('change', () => {
    try {
      localStorage.setItem(X_AXIS_KEY, select.value);
    } catch {
      /* not kept: the choice still applies to this page */
    }
    onChange(select.value);
  });
  return h('div.control', {}, h('label', { for: 'x-axis' }, 'X axis'), select);
}

/** A point's [x, customdata] on ``axis``, from its round and its elapsed time. */
export function xPair(axis, round, elapsed) {
  return axis === 'round' ? [round, elapsed] : [elapsed, round];
}

/** The round of a clicked point of a trace drawn on ``axis`` (x or customdata). */
export function roundOfPoint(point, axis) {
  return axis === 'round' ? point.x : point.customdata;
}

/** The x axis layout fields that follow the choice (title; tick format of seconds). */
export function xAxisLayout(axis) {
  const format = axis === 'round' ? { ticksuffix: '', tickformat: '', hoverformat: '' } : axisFormat('s');
  return { title: { text: X_AXES[axis].title }, ...format };
}

/** Move a drawn trace to the other axis: its x and customdata trade places. */
export function swapX(trace) {
  [trace.x, trace.customdata] = [trace.customdata || [], trace.x];
}

const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

/** A colour per device: plotly's palette for up to 10 devices, then evenly spread hues. */
export function deviceColor(index, count) {
  if (count <= PALETTE.length) return PALETTE[index % PALETTE.length];
  const hue = Math.round((index * 360) / count);
  return `hsl(${hue}, 62%, ${index % 2 ? 40 : 52}%)`;
}

export function seriesColor(index) {
  return PALETTE[index % PALETTE.length];
}

export function purge(el) {
  if (el && window.Plotly) window.Plotly.purge(el);
}

/** Resolves once plotly.js has loaded (it is a deferred classic script before the app module). */
export function plotly() {
  if (!window.Plotly) throw new Error('plotly.js did not load from /vendor/');
  return window.Plotly;
}
