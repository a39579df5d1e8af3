// A study's round series per cell (GET /api/studies/{id}/series): one line per cell, the mean over
// the cell's seeds of one round field against the round or the modeled elapsed time (Σ latency_s),
// a colour per cell however many there are, on a linear or a log y axis (one outlier cell flattens the
// others on a linear one).

import { axisFormat } from '../format.js';
import { PLOT_CONFIG, baseLayout, deviceColor, plotText, plotly } from '../plot.js';

export const SERIES_X = [['round', 'round'], ['elapsed', 'modeled time (s)']];
export const SERIES_Y = [['linear', 'linear'], ['log', 'log']];
const MARKERS_UP_TO = 40; // points per line drawn with markers (a few rounds: a line alone hides them)

/** Draw ``answer`` into ``el`` on a ``yType`` ('linear' or 'log') y axis; returns the number of points drawn. */
export function drawSeriesPlot(el, answer, yType = 'linear') {
  const elapsed = answer.x === 'elapsed';
  let points = 0;
  const traces = answer.cells.map((cell, i) => {
    points += cell.value.length;
    return {
      x: elapsed ? cell.elapsed_s : cell.round,
      y: cell.value,
      mode: cell.value.length <= MARKERS_UP_TO ? 'lines+markers' : 'lines',
      name: plotText(cell.label),
      line: { color: deviceColor(i, answer.cells.length), width: 2 },
      marker: { size: 5 },
      customdata: cell.round.map((r, j) => [r, cell.elapsed_s[j]]),
      hovertemplate: `round %{customdata[0]} · %{customdata[1]:.4~s}s<br>${answer.field} %{y}<extra>%{fullData.name}</extra>`,
      meta: { cell: cell.index },
    };
  });
  const layout = baseLayout({
    showlegend: true,
    uirevision: `${answer.field}:${answer.x}:${yType}`, // a zoom is kept across live reloads, not across fields or axes
    margin: { l: 70, r: 12, t: 28, b: 44 },
    xaxis: { title: { text: elapsed ? 'modeled time (s)' : 'round' }, gridcolor: '#eef1f5', zeroline: false, automargin: true,
      ...(elapsed ? axisFormat('s') : {}) },
    yaxis: { title: { text: answer.unit === '1' ? answer.field : `${answer.field} (${answer.unit})` }, type: yType,
      gridcolor: '#eef1f5', zeroline: false, automargin: true, ...axisFormat(answer.unit) },
  });
  plotly().react(el, traces, layout, PLOT_CONFIG);
  el.dataset.traces = String(traces.length);
  el.dataset.points = String(points);
  el.dataset.x = answer.x;
  el.dataset.field = answer.field;
  el.dataset.y = yType;
  return points;
}
