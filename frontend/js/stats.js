// Measurements the benchmark (bench/dashboard.py) and the browser tests read from the page:
// window.collapipeStats.draws — one entry per live round drawn: round, event id, the publisher's
// stamp if the event carries one, and wall-clock times (performance.timeOrigin-aligned) of its receipt,
// of the start of the animation frame that drew it, and of its drawing (every on-screen chart's
// Plotly.extendTraces returned).

const MAX_DRAWS = 5000;

export const stats = {
  draws: [],
  flushes: 0,
  views: {},
};
window.collapipeStats = stats;

export function nowUnixMs() {
  return performance.timeOrigin + performance.now();
}

export function recordDraw(entry) {
  stats.draws.push(entry);
  if (stats.draws.length > MAX_DRAWS) stats.draws.splice(0, stats.draws.length - MAX_DRAWS);
}

export function recordView(name, values) {
  stats.views[name] = { ...(stats.views[name] || {}), ...values };
}
