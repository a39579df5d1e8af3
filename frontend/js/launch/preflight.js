// Pre-flight: what the first round of the chosen policy costs, per device, before anything runs —
// modeled memory against capacity, round latency split into compute and communication, energy
// against budget. Asks POST /api/config/preflight (body: the config; answer: round 0 as the `round`
// live event carries it, {round: RoundRecord, devices: [DeviceRecord]}, with the model's trainable and
// frozen parameters and each scheduled device's memory by part: {model: {...}, memory_parts: {id: {...}}}).

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
    const { round, devices, model } = result;
    const parts = result.memory_parts || {};
    const ids = devices.map((d) => d.device_id);
    // the device whose modeled memory is the largest share of its capacity
    const peak = devices.reduce((m, d) => (
      !m || d.memory_bytes / d.memory_capacity_bytes > m.memory_bytes / m.memory_capacity_bytes ? d : m), null);
    const overBudget = devices.filter((d) => d.energy_j > d.energy_budget_j).length;
    const share = peak ? `${formatNumber(100 * (peak.memory_bytes / peak.memory_capacity_bytes), 3)} %` : '—';
    panel.append(h('div.tiles', {},
      tile('Round latency', formatValue(round.latency_s, 's'), `round 0, policy ${round.policy}`, 'latency'),
      tile('Peak memory use', peak ? formatValue(peak.memory_bytes, 'bytes') : '—',
        peak ? `on ${peak.device_id}: ${share} of its ${formatValue(peak.memory_capacity_bytes, 'bytes')}` : 'no device',
        'memory'),
      tile('Feasible this round', round.feasible ? 'yes' : 'no',
        (round.violations || []).join('; ') || 'segments, bandwidth, power and memory of round 0 hold; energy is not a per-round limit',
        'feasible'),
      tile('Above the energy budget', `${overBudget} / ${devices.length}`,
        'devices in round 0: the budget Ē is a long-term average per round, which the virtual queues keep over the run (a round may exceed it)',
        'energy')));
    if (model) {
      panel.append(h('div.tiles', { 'data-role': 'parameters' },
        tile('Trainable parameters', formatNumber(model.trainable_params, 4), `of ${formatNumber(model.params, 4)} (${model.precision})`),
        tile('Frozen parameters', formatNumber(model.frozen_params, 4), model.frozen_params ? 'stored at the training precision' : 'every weight trains'),
        tile('Recomputing devices', String(model.recomputing_devices), 'activations recomputed in backward')));
    }
    // the modeled memory by part on the devices that hold blocks, the capacity beside it
    const held = ids.filter((id) => parts[id]);
    const partNames = [
      ['weights', 'weights', '#1f77b4'], ['gradients', 'gradients', '#aec7e8'],
      ['optimizer_state', 'optimizer state', '#ff7f0e'], ['activations', 'activations and buffers', '#2ca02c'],
      ['runtime', 'runtime', '#c7c7c7'],
    ];
    const capacity = Object.fromEntries(devices.map((d) => [d.device_id, d.memory_capacity_bytes]));
    bar('Memory per device', 'modeled peak memory by part on the devices that hold blocks, against the device\'s capacity', [
      ...partNames.map(([key, name, color]) => ({
        type: 'bar', name, x: held, y: held.map((id) => parts[id][key]), marker: { color }, offsetgroup: 'model',
      })),
      { type: 'bar', name: 'capacity', x: held, y: held.map((id) => capacity[id]), marker: { color: '#d5dde6' }, offsetgroup: 'capacity' },
    ], 'B', { barmode: 'stack' });
    bar('Latency per device', 'modeled compute and communication time in round 0', [
      { type: 'bar', name: 'compute', x: ids, y: devices.map((d) => d.compute_s), marker: { color: '#2ca02c' } },
      { type: 'bar', name: 'communication', x: ids, y: devices.map((d) => d.comm_s), marker: { color: '#ff7f0e' } },
    ], 's', { barmode: 'stack' });
    bar('Energy per device', 'modeled energy in round 0 against the budget Ē, a long-term average per round (a queue constraint: a round may exceed it)', [
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

function tile(label, value, note, name) {
  return h('div.tile', { 'data-tile': name }, h('div.tile-label', {}, label), h('div.tile-value', {}, value), h('div.tile-note', {}, note));
}
