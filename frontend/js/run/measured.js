// Measured vs modeled (distributed executor). For one round — the newest, updated live — every
// participant that ran a pipeline stage (the CU, each scheduled device, the edge server) with what
// its own process measured beside what the cost model says for the same device:
//   memory: modeled δ·(weights + grads + optimizer) + in-flight activations (memory_bytes less the
//           model's runtime_overhead_bytes) against the measured tensor peak and the measured
//           resident state + VmHWM rise; the process's whole peak RSS is in the table;
//   time:   modeled compute_s / comm_s / idle_s against measured compute_s / send_s / idle_s.
// The CU and the edge server have measured figures only (the cost model has no record for them).
// Measured times are this host's CPU (ranks share its cores); modeled times use the device profiles'
// FLOP/s and link rates, so the time chart has a logarithmic axis. docs/distributed.md defines each
// measured figure. Data: the decision log's items (GET /api/runs/{id}/decisions, each item's
// `measured`) and the modeled values of the round, from the run view's history when it is the
// newest round loaded, else from GET /api/runs/{id}/devices; live rounds carry both. Memory is
// labelled in the page's byte units and the time axis's ticks follow its span (axes.js).

import { get } from '../api.js';
import { h, clear } from '../dom.js';
import { axisFormat, formatNumber, formatValue } from '../format.js';
import { PLOT_CONFIG, baseLayout, plotly, purge } from '../plot.js';
import { byteTicks, bytesText, logAxisTicks, logTickStep } from './axes.js';

/** Rounds of measured figures loaded with the page: the decision log API's page limit. */
export const MEASURED_ROUNDS = 500;
const MODELED_METRICS = ['num_blocks', 'memory_bytes', 'compute_s', 'comm_s', 'idle_s'];

const MEMORY_TRACES = [
  { key: 'modeled', name: 'modeled (without runtime overhead)', color: '#9db4cf' },
  { key: 'tensor', name: 'measured: tensor peak', color: '#1f77b4' },
  { key: 'rss', name: 'measured: state + RSS rise', color: '#ff7f0e' },
];
const TIME_TRACES = [
  { name: 'modeled compute', color: '#9db4cf', value: (p) => p.modeled?.compute_s },
  { name: 'measured compute', color: '#1f77b4', value: (p) => p.measured.compute_s },
  { name: 'modeled comm', color: '#f3c99f', value: (p) => p.modeled?.comm_s },
  { name: 'measured send', color: '#ff7f0e', value: (p) => p.measured.send_s },
  { name: 'modeled idle', color: '#b9dcb0', value: (p) => p.modeled?.idle_s },
  { name: 'measured idle', color: '#2ca02c', value: (p) => p.measured.idle_s },
];

/** Cluster, role (CU 0, device 1, edge 2), device index of a participant id ("c0-cu", "c1-d2", "c0-edge"). */
function order(id) {
  const m = /^c(\d+)-(cu|edge|d(\d+))$/.exec(id);
  if (!m) return [Infinity, 0, 0];
  const role = m[2] === 'cu' ? 0 : m[2] === 'edge' ? 2 : 1;
  return [Number(m[1]), role, m[3] === undefined ? 0 : Number(m[3])];
}

function byParticipant(a, b) {
  const x = order(a);
  const y = order(b);
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
}

/** Training memory as measured by the OS: weights and optimizer state at the start + the VmHWM rise. */
function rssTrainingBytes(m) {
  if (m.resident_state_bytes == null || m.peak_rss_delta_bytes == null) return null;
  return m.resident_state_bytes + m.peak_rss_delta_bytes;
}

export function isMeasuredRun(run) {
  return run.executor === 'distributed';
}

export class MeasuredView {
  constructor(run) {
    this.runId = run.id;
    this.overheadBytes = run.config.network.runtime_overhead_bytes ?? 0;
    this.shownRound = null;
    this.memoryEl = h('div.chart', { id: 'chart-measured-memory', 'data-chart': 'measured-memory', role: 'img', 'aria-label': 'Peak memory per participant, measured against modeled' });
    this.timeEl = h('div.chart', { id: 'chart-measured-time', 'data-chart': 'measured-time', role: 'img', 'aria-label': 'Compute, send and idle time per participant, measured against modeled' });
    this.heading = h('span', {}, 'no round measured yet');
    this.tbody = h('tbody', {}, h('tr', {}, h('td.empty', { colspan: 8 }, 'No round measured yet.')));
    this.panels = [
      h('section.chart-panel', { 'aria-labelledby': 'title-measured-memory' },
        h('h3', { id: 'title-measured-memory' }, 'Peak memory: measured vs modeled'),
        h('p.chart-note', {}, `modeled memory_bytes less runtime_overhead_bytes (${formatValue(this.overheadBytes, 'bytes')}) · measured peak of tensor storages · measured resident state + VmHWM rise; the CU and the edge server are measured only`),
        this.memoryEl),
      h('section.chart-panel', { 'aria-labelledby': 'title-measured-time' },
        h('h3', { id: 'title-measured-time' }, 'Time in the round: measured vs modeled'),
        h('p.chart-note', {}, 'log scale · modeled: device profile FLOP/s and link rates · measured: this host\'s CPU, ranks sharing its cores'),
        this.timeEl),
    ];
    this.table = h('section.panel', { id: 'measured' },
      h('h3', {}, 'Measured vs modeled per participant — ', this.heading),
      h('p.chart-note', {}, 'Each cell: modeled / measured (bold), measured by each rank of the distributed executor (docs/distributed.md). Compute = forward + backward; comm: modeled transmit time / measured time blocked on sends; receive wait = time blocked on receives; idle = step − compute − send. Memory: modeled without runtime overhead / measured tensor peak (weights + optimizer state + the peak of tensors allocated in training) / measured resident state + VmHWM rise. Process RSS: the whole process\'s resident-set high-water mark.'),
      h('div.table-wrap', {}, h('table.measured-table', { 'aria-label': 'Measured vs modeled per participant' },
        h('thead', {}, h('tr', {},
          h('th', {}, 'Participant'), h('th.num', {}, 'TEBs'), h('th.num', {}, 'Compute'), h('th.num', {}, 'Comm / send'),
          h('th.num', {}, 'Receive wait'), h('th.num', {}, 'Idle'), h('th.num', {}, 'Memory / tensor peak / RSS rise'),
          h('th.num', {}, 'Process RSS'))),
        this.tbody)));
    this.drawn = false;
  }

  /**
   * The measured figures of the decision log items ``decisions`` (oldest first) as [{round,
   * measured}]; draws the newest beside ``modeled``, the cost model's figures of the newest round
   * loaded ({device_id: {metric: value}}, null if not at hand), or, for another round, the API's.
   */
  async load(decisions, modeled) {
    const items = decisions.filter((item) => item.measured && Object.keys(item.measured).length)
      .map((item) => ({ round: item.round, measured: item.measured }));
    const newest = items[items.length - 1];
    if (newest) {
      const last = decisions[decisions.length - 1];
      const figures = modeled && newest.round === last.round ? modeled : await this.modeledRound(newest.round);
      this.show(newest.round, newest.measured, figures);
    }
    return items;
  }

  /** The cost model's per-device figures of one stored round: {device_id: {metric: value}}. */
  async modeledRound(round) {
    const data = await get(`/api/runs/${this.runId}/devices`, { metric: MODELED_METRICS, from: round, to: round, method: 'none' });
    const modeled = {};
    for (const [metric, { series }] of Object.entries(data.metrics)) {
      for (const [device, points] of Object.entries(series)) {
        if (!modeled[device]) modeled[device] = {};
        modeled[device][metric] = points.value[points.value.length - 1];
      }
    }
    return modeled;
  }

  /** Live rounds ({round: RoundRecord, devices: [DeviceRecord]}): show the newest one that was measured. */
  extend(rounds) {
    for (let i = rounds.length - 1; i >= 0; i -= 1) {
      const event = rounds[i];
      const measured = event.round.measured || {};
      if (!Object.keys(measured).length || event.round.round <= (this.shownRound ?? -1)) continue;
      const modeled = {};
      for (const d of event.devices) modeled[d.device_id] = d;
      this.show(event.round.round, measured, modeled);
      return;
    }
  }

  participants(measured, modeled) {
    return Object.keys(measured).sort(byParticipant).map((id) => {
      const model = modeled[id];
      const scheduled = model && model.num_blocks > 0;
      return {
        id,
        measured: measured[id],
        modeled: model || null,
        modeledMemory: scheduled ? Math.max(0, model.memory_bytes - this.overheadBytes) : null,
      };
    });
  }

  show(round, measured, modeled) {
    this.shownRound = round;
    const rows = this.participants(measured, modeled);
    this.heading.textContent = `round ${round}`;
    this.renderTable(rows);
    this.drawCharts(rows);
  }

  renderTable(rows) {
    clear(this.tbody);
    const modeled = (value, unit, field) => h('span', { 'data-field': field }, formatValue(value, unit));
    const measured = (value, unit, field) => h('strong', { 'data-field': field }, formatValue(value, unit));
    for (const p of rows) {
      const m = p.measured;
      const tensorRatio = p.modeledMemory ? m.peak_tensor_bytes / p.modeledMemory : null;
      this.tbody.append(h('tr', { 'data-participant': p.id },
        h('td', {}, p.id),
        h('td.num', {}, p.modeled ? p.modeled.num_blocks : '—'),
        h('td.num', {}, modeled(p.modeled?.compute_s, 's', 'modeled-compute_s'), ' / ', measured(m.compute_s, 's', 'measured-compute_s')),
        h('td.num', {}, modeled(p.modeled?.comm_s, 's', 'modeled-comm_s'), ' / ', measured(m.send_s, 's', 'measured-send_s')),
        h('td.num', {}, measured(m.recv_s, 's', 'measured-recv_s')),
        h('td.num', {}, modeled(p.modeled?.idle_s, 's', 'modeled-idle_s'), ' / ', measured(m.idle_s, 's', 'measured-idle_s')),
        h('td.num', { title: tensorRatio ? `tensor peak / modeled = ${formatNumber(tensorRatio)}` : '' },
          modeled(p.modeledMemory, 'bytes', 'modeled-memory'), ' / ',
          measured(m.peak_tensor_bytes, 'bytes', 'measured-peak_tensor_bytes'), ' / ',
          measured(rssTrainingBytes(m), 'bytes', 'measured-rss-training')),
        h('td.num', {}, measured(m.peak_rss_bytes, 'bytes', 'measured-peak_rss_bytes'))));
    }
  }

  drawCharts(rows) {
    const x = rows.map((p) => p.id);
    const memoryValue = {
      modeled: (p) => p.modeledMemory,
      tensor: (p) => p.measured.peak_tensor_bytes ?? null,
      rss: (p) => rssTrainingBytes(p.measured),
    };
    const memory = MEMORY_TRACES.map((t) => {
      const y = rows.map((p) => memoryValue[t.key](p));
      return {
        type: 'bar', name: t.name, x, y, hovertext: y.map(bytesText), marker: { color: t.color },
        hovertemplate: `%{x} · ${t.name}<br>%{hovertext}<extra></extra>`,
      };
    });
    const time = TIME_TRACES.map((t) => ({
      type: 'bar', name: t.name, x, y: rows.map((p) => { const v = t.value(p); return v > 0 ? v : null; }), marker: { color: t.color },
      hovertemplate: `%{x} · ${t.name}<br>%{y}<extra></extra>`,
    }));
    const layout = (unit, extra = {}) => baseLayout({
      barmode: 'group', showlegend: true, margin: { l: 58, r: 12, t: 44, b: 40 },
      xaxis: { type: 'category', gridcolor: '#eef1f5', automargin: true },
      yaxis: { gridcolor: '#eef1f5', zeroline: false, automargin: true, ...axisFormat(unit), ...extra },
    });
    // bars start at 0: the ticks span 0 to the tallest
    const tallest = Math.max(0, ...memory.flatMap((t) => t.y).filter((v) => Number.isFinite(v)));
    plotly().react(this.memoryEl, memory, layout('1', { tickmode: 'array', ...byteTicks(0, tallest) }), PLOT_CONFIG);
    const step = logTickStep(time.flatMap((t) => t.y));
    plotly().react(this.timeEl, time, layout('s', { type: 'log', tickformat: '.2~s', ...logAxisTicks(step) }), PLOT_CONFIG);
    this.drawn = true;
  }

  destroy() {
    purge(this.memoryEl);
    purge(this.timeEl);
  }
}
