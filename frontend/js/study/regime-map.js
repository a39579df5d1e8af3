// A study's regime map (GET /api/studies/{id} → regime_map): one heatmap per panel, x and y the two
// axes the study named, the colour DSSDA's mean round latency over the best budget-holding baseline's
// (below 1: DSSDA is faster), each cell annotated with DSSDA's devices holding blocks per cluster and
// its M. Every label and text comes from the server and reaches plotly.js through plotText.

import { h } from '../dom.js';
import { PLOT_CONFIG, baseLayout, plotText, plotly, purge } from '../plot.js';

// blue below 1 (DSSDA faster than the best budget holder), white at 1, red above (the HTML report's too)
const COLORSCALE = [[0, '#2166ac'], [0.5, '#f7f7f7'], [1, '#b2182b']];

/** The panel's grids [y][x]: ratios, annotations, hover texts. */
function grids(map, panel) {
  const empty = () => map.y_values.map(() => map.x_values.map(() => null));
  const z = empty();
  const text = empty();
  const custom = empty();
  for (const point of map.points) {
    if (point.panel !== panel) continue;
    z[point.y][point.x] = point.latency_ratio;
    text[point.y][point.x] = plotText(point.annotation);
    custom[point.y][point.x] = plotText(point.summary);
  }
  return { z, text, custom };
}

/**
 * Draw ``map`` into ``container`` (one chart per panel; live reloads redraw the same charts); returns
 * the number of points with a ratio.
 */
export function drawRegimeMap(container, map) {
  const existing = [...container.querySelectorAll('.chart')];
  if (existing.length !== map.panels.length) {
    for (const old of existing) purge(old);
    container.replaceChildren(...map.panels.map((panel, index) => h('div.chart', {
      'data-panel': index, role: 'img', 'aria-label': `regime map${panel ? ` (${panel})` : ''}`,
    })));
  }
  const elements = [...container.querySelectorAll('.chart')];
  const charts = map.panels.map((panel, index) => {
    const el = elements[index];
    const { z, text, custom } = grids(map, index);
    const trace = {
      type: 'heatmap',
      x: map.x_labels.map(plotText),
      y: map.y_labels.map(plotText),
      z,
      text,
      customdata: custom,
      texttemplate: '%{text}',
      hovertemplate: '%{x}, %{y}: ×%{z:.3g}<br>%{customdata}<extra></extra>',
      colorscale: COLORSCALE,
      zmid: 1,
      colorbar: { title: { text: 'DSSDA / best holder' } },
      meta: { regime: true, panel: index },
    };
    const layout = baseLayout({
      margin: { l: 110, r: 12, t: panel ? 28 : 8, b: 48 },
      title: panel ? { text: plotText(panel), font: { size: 12 } } : undefined,
      xaxis: { title: { text: plotText(map.x_field) }, type: 'category', automargin: true },
      yaxis: { title: { text: plotText(map.y_field) }, type: 'category', automargin: true },
      height: 110 + 60 * map.y_values.length,
    });
    return { el, trace, layout };
  });
  let points = 0;
  for (const { el, trace, layout } of charts) {
    plotly().react(el, [trace], layout, PLOT_CONFIG);
    points += trace.z.flat().filter((v) => v !== null).length;
  }
  container.dataset.points = String(points);
  return points;
}
