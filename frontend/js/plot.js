// Shared plotly.js settings: offline (no links to plotly's cloud), quiet mode bar, readable fonts.

export const PLOT_CONFIG = {
  responsive: true,
  displaylogo: false,
  showLink: false,
  showSendToCloud: false,
  showEditInChartStudio: false,
  modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d'],
};

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
