// Pre-flight: what the first round of the chosen policy costs, per device, before anything runs —
// modeled memory against capacity, round latency split into compute and communication, energy
// against budget. Asks POST /api/config/preflight (body: the config; answer: round 0 as the `round`
// live event carries it, {round: RoundRecord, devices: [DeviceRecord]}).

import { post } from '../api.js';
import { h, clear } from '../dom.js';
import { formatValue, formatNumber } from '../format.js';
import { PLOT_CONFIG, baseLayout, plotly, purge } from '../plot.js';

export function createPreflight(panel) {
  const charts = [];

  function reset(message) {
    charts.splice(0).forEach(purge);
    clear(panel);
    delete panel.dataset.state;
    panel.append(h('h2', {}, 'Pre-flight'));
    if (message) panel.append(h('p.muted', {}, message));
  }

  function bar(title, note, traces, unit, extra = {}) {
    const el = h('div.chart.chart-short');
    panel.append(h('h3', {}, title), h('p.chart-note', {}, note), el);
    const layout = baseLayout({
      barmode: 'group', showlegend: true,
      xaxis: { type: 'category', automargin: true, tickangle: -40 },
      yaxis: { gridcolor: '#eef1f5', automargin: true, ticksuffix: unit, tickformat: '.3~s' },
      margin: { l: 58, r: 8, t: 24, b: 50 }, ...extra,
    });
    plotly().newPlot(el, traces, layout, PLOT_CONFIG);
    charts.push(el);
  }

  function renderResult(result) {
    const { round, devices } = result;
    const ids = devices.map((d) => d.device_id);
    const peak = devices.reduce((m, d) => Math.max(m, d.memory_bytes / d.memory_capacity_bytes), 0);
    const overBudget = devices.filter((d) => d.energy_j > d.energy_budget_j).length;
    panel.append(h('div.tiles', {},
      tile('Round latency', formatValue(round.latency_s, 's'), `round 0, policy ${round.policy}`),
      tile('Peak memory use', `${formatNumber(100 * peak, 3)} %`, 'of a device\'s capacity'),
      tile('Energy over budget', `${overBudget} / ${devices.length}`, 'devices in round 0'),
      tile('Feasible', round.feasible ? 'yes' : 'no', (round.violations || []).join('; ') || 'no violations')));
    bar('Memory per device', 'modeled peak memory against the device\'s capacity', [
      { type: 'bar', name: 'modeled', x: ids, y: devices.map((d) => d.memory_bytes), marker: { color: '#1f77b4' } },
      { type: 'bar', name: 'capacity', x: ids, y: devices.map((d) => d.memory_capacity_bytes), marker: { color: '#d5dde6' } },
    ], 'B');
    bar('Latency per device', 'modeled compute and communication time in round 0', [
      { type: 'bar', name: 'compute', x: ids, y: devices.map((d) => d.compute_s), marker: { color: '#2ca02c' } },
      { type: 'bar', name: 'communication', x: ids, y: devices.map((d) => d.comm_s), marker: { color: '#ff7f0e' } },
    ], 's', { barmode: 'stack' });
    bar('Energy per device', 'modeled energy in round 0 against the per-round budget Ē', [
      { type: 'bar', name: 'energy', x: ids, y: devices.map((d) => d.energy_j), marker: { color: '#9467bd' } },
      { type: 'bar', name: 'budget', x: ids, y: devices.map((d) => d.energy_budget_j), marker: { color: '#d5dde6' } },
    ], 'J');
  }

  /** Model round 0 of ``config`` (already validated). */
  async function run(config) {
    reset();
    const waiting = h('p.muted', {}, 'Modeling round 0…');
    panel.append(waiting);
    try {
      const result = await post('/api/config/preflight', config);
      waiting.remove();
      renderResult(result);
      panel.dataset.state = 'modeled';
    } catch (error) {
      waiting.remove();
      panel.append(h('p.bad', {}, `Pre-flight failed: ${error.message}`));
      panel.dataset.state = 'error';
    }
  }

  reset('Check the config to see what its first round costs on each device before you launch.');
  return { run, reset, destroy: () => charts.splice(0).forEach(purge) };
}

function tile(label, value, note) {
  return h('div.tile', {}, h('div.tile-label', {}, label), h('div.tile-value', {}, value), h('div.tile-note', {}, note));
}
