// Per-device charts over rounds, one trace per device and series. History comes downsampled from
// GET /api/runs/{id}/devices; live rounds are appended with Plotly.extendTraces (one call per chart
// per batch of rounds). A live redraw costs plotly.js a full replot of the chart (~5–7 ms for a
// cluster's devices), mostly fixed per chart: the axes are liveAxis() (no tick label measuring),
// and long live series are thinned in their older part (thinTrace) so the cost stays bounded.
//
// Devices are loaded on demand (a big network opens on one cluster): addDevices() adds their traces.
// Constant per-device lines (capacity, budget) are one trace of segments per chart, and measured
// values (distributed executor) one marker trace, so a chart has about one trace per device.

import { h } from '../dom.js';
import { axisFormat } from '../format.js';
import { PLOT_CONFIG, baseLayout, deviceColor, liveAxis, plotly, purge, thinTrace } from '../plot.js';

/** The process's measured peak resident set from DeviceRecord.measured (distributed executor), in bytes. */
function measuredMemory(device) {
  const m = device.measured || {};
  return m.peak_rss_bytes ?? null;
}

export const DEVICE_CHARTS = [
  {
    id: 'queue', title: 'Virtual queue Q_k', unit: '1',
    note: 'Lyapunov energy queue each device\'s decision saw (queue, modeled)',
    series: [{ metric: 'queue' }],
  },
  {
    id: 'latency', title: 'Latency split: compute vs communication', unit: 's',
    note: 'solid: compute_s · dotted: comm_s (modeled, per round)',
    series: [{ metric: 'compute_s' }, { metric: 'comm_s', dash: 'dot' }],
  },
  {
    id: 'memory', title: 'Memory vs capacity', unit: 'bytes',
    note: 'solid: modeled memory_bytes · grey dashed: memory_capacity_bytes · open circles: measured peak RSS of the device\'s whole process (distributed executor; Python and torch included, which the model counts as runtime_overhead_bytes)',
    series: [{ metric: 'memory_bytes' }],
    limit: { metric: 'memory_capacity_bytes', name: 'capacity' },
    measured: { name: 'measured process peak RSS', value: measuredMemory },
  },
  {
    id: 'energy', title: 'Energy vs budget', unit: 'J',
    note: 'solid: energy_j (modeled) · grey dashed: energy_budget_j Ē_k',
    series: [{ metric: 'energy_j' }],
    limit: { metric: 'energy_budget_j', name: 'budget' },
  },
  {
    id: 'bandwidth', title: 'Bandwidth share β_k', unit: '1',
    note: 'bandwidth_share of the cluster\'s band', series: [{ metric: 'bandwidth_share' }],
  },
  {
    id: 'power', title: 'Transmit power p_k', unit: 'W',
    note: 'power_w chosen by the policy', series: [{ metric: 'power_w' }],
  },
];

/** Device metrics whose history is served downsampled (GET /devices?metric=...). */
export function seriesMetrics() {
  return [...new Set(DEVICE_CHARTS.flatMap((c) => c.series.map((s) => s.metric)))];
}

/** Constant per-device metrics: two points (first and last round) are the whole series. */
export function limitMetrics() {
  return DEVICE_CHARTS.filter((c) => c.limit).map((c) => c.limit.metric);
}

export class DeviceChart {
  constructor(def, allDevices) {
    this.def = def;
    this.allDevices = allDevices;
    this.colorIndex = new Map(allDevices.map((d, i) => [d, i]));
    this.traceOf = new Map(); // `${seriesIndex}|${device}` -> trace index
    this.limitValue = new Map(); // device -> constant limit (capacity, budget)
    this.lastRound = 0;
    this.el = h('div.chart', { id: `chart-${def.id}`, 'data-chart': def.id, role: 'img', 'aria-label': `${def.title} per device over rounds` });
    this.panel = h('section.chart-panel', { 'aria-labelledby': `title-${def.id}` },
      h('h3', { id: `title-${def.id}` }, def.title), h('p.chart-note', {}, def.note), this.el);
    this.drawn = false;
  }

  color(device) {
    return deviceColor(this.colorIndex.get(device), this.allDevices.length);
  }

  deviceTraces(history, devices, firstIndex) {
    const traces = [];
    const showLegend = this.allDevices.length <= 8;
    this.def.series.forEach((s, si) => {
      devices.forEach((device) => {
        const data = history[s.metric]?.[device];
        this.traceOf.set(`${si}|${device}`, firstIndex + traces.length);
        if (data && data.round.length) this.lastRound = Math.max(this.lastRound, data.round[data.round.length - 1]);
        traces.push({
          type: 'scatter', mode: 'lines', name: device, legendgroup: device, showlegend: showLegend && si === 0,
          x: data ? data.round.slice() : [], y: data ? data.value.slice() : [],
          line: { color: this.color(device), width: 1.6, dash: s.dash || 'solid' },
          hovertemplate: `${device} · ${s.metric}<br>round %{x}<br>%{y}<extra></extra>`,
        });
      });
    });
    if (this.def.limit) {
      for (const device of devices) {
        const data = history[this.def.limit.metric]?.[device];
        if (data && data.value.length) this.limitValue.set(device, data.value[data.value.length - 1]);
      }
    }
    return traces;
  }

  /** The limit lines (capacity, budget) of every loaded device: one trace, null between segments. */
  limitSegments() {
    const x = [];
    const y = [];
    const text = [];
    for (const [device, value] of this.limitValue) {
      x.push(0, this.lastRound, null);
      y.push(value, value, null);
      text.push(device, device, null);
    }
    return { x, y, text };
  }

  /** First draw: the limit and measured traces (if any) first, then one trace per device and series. */
  draw(history, devices) {
    const fixed = [];
    if (this.def.limit) fixed.push('limit');
    if (this.def.measured) fixed.push('measured');
    this.fixed = fixed;
    const traces = this.deviceTraces(history, devices, fixed.length);
    const head = fixed.map((kind) => (kind === 'limit'
      ? {
        type: 'scatter', mode: 'lines', name: this.def.limit.name, ...this.limitSegments(), connectgaps: false,
        line: { color: '#8a97a6', width: 1, dash: 'dash' }, showlegend: false,
        hovertemplate: `%{text} · ${this.def.limit.metric}<br>%{y}<extra></extra>`,
      }
      : {
        type: 'scatter', mode: 'markers', name: this.def.measured.name, x: [], y: [], text: [], showlegend: false,
        marker: { size: 7, color: [], symbol: 'circle-open', line: { width: 2 } },
        hovertemplate: `%{text} · measured<br>round %{x}<br>%{y}<extra></extra>`,
      }));
    const showLegend = this.allDevices.length <= 8;
    const layout = baseLayout({
      showlegend: showLegend,
      margin: { l: 58, r: 12, t: showLegend ? 30 : 8, b: 40 },
      xaxis: liveAxis({ title: { text: 'round' } }),
      yaxis: liveAxis(axisFormat(this.def.unit)),
    });
    plotly().newPlot(this.el, [...head, ...traces], layout, PLOT_CONFIG);
    this.drawn = true;
  }

  /** Add traces for devices loaded later (another cluster), from their history. */
  addDevices(history, devices) {
    const fresh = devices.filter((d) => !this.traceOf.has(`0|${d}`));
    if (!fresh.length) return;
    const traces = this.deviceTraces(history, fresh, this.el.data.length);
    plotly().addTraces(this.el, traces);
    this.refreshLimits();
  }

  refreshLimits() {
    if (!this.def.limit) return;
    const { x, y, text } = this.limitSegments();
    const trace = this.el.data[this.fixed.indexOf('limit')];
    trace.x = x;
    trace.y = y;
    trace.text = text;
  }

  /** Append ``rounds`` (live events {round: RoundRecord, devices: [DeviceRecord]}); one redraw.
   * ``only``: a set of device ids to append for (devices just loaded), default all loaded ones. */
  extend(rounds, only = null) {
    if (!this.drawn || !rounds.length) return;
    const xs = [];
    const ys = [];
    const indices = [];
    this.def.series.forEach((s, si) => {
      const columns = new Map();
      for (const event of rounds) {
        for (const device of event.devices) {
          if (only && !only.has(device.device_id)) continue;
          const index = this.traceOf.get(`${si}|${device.device_id}`);
          const value = device[s.metric];
          if (index === undefined || value === null || value === undefined) continue;
          if (!columns.has(index)) columns.set(index, { x: [], y: [] });
          columns.get(index).x.push(event.round.round);
          columns.get(index).y.push(value);
        }
      }
      for (const [index, column] of columns) {
        thinTrace(this.el.data[index], column.x.length);
        xs.push(column.x);
        ys.push(column.y);
        indices.push(index);
      }
    });
    this.lastRound = Math.max(this.lastRound, rounds[rounds.length - 1].round.round);
    if (this.def.limit) {
      for (const device of rounds[rounds.length - 1].devices) {
        if (this.traceOf.has(`0|${device.device_id}`)) this.limitValue.set(device.device_id, device[this.def.limit.metric]);
      }
    }
    this.refreshLimits(); // in place: the redraw below picks it up
    if (this.def.measured) this.extendMeasured(rounds, only);
    if (indices.length) plotly().extendTraces(this.el, { x: xs, y: ys }, indices);
  }

  /** Measured figures of stored rounds ([{round, measured: {participant: figures}}], from the decision log API). */
  addMeasuredHistory(items) {
    if (!this.drawn || !this.def.measured || !items.length) return;
    const events = items.map((item) => ({
      round: { round: item.round },
      devices: Object.entries(item.measured).map(([id, measured]) => ({ device_id: id, measured })),
    }));
    this.extendMeasured(events, null);
    plotly().redraw(this.el);
  }

  extendMeasured(rounds, only) {
    const trace = this.el.data[this.fixed.indexOf('measured')];
    for (const event of rounds) {
      for (const device of event.devices) {
        const value = this.def.measured.value(device);
        if (value === null || !this.traceOf.has(`0|${device.device_id}`)) continue;
        if (only && !only.has(device.device_id)) continue;
        trace.x.push(event.round.round);
        trace.y.push(value);
        trace.text.push(device.device_id);
        trace.marker.color.push(this.color(device.device_id));
      }
    }
    // in the legend once it has points (runs of executors that measure nothing show no entry)
    trace.showlegend = trace.x.length > 0;
  }

  /** Show only the devices ``visible(deviceId)`` accepts (fixed traces always shown). */
  filter(visible) {
    if (!this.drawn) return;
    const flags = this.el.data.map(() => true);
    for (const [key, index] of this.traceOf) flags[index] = visible(key.split('|')[1]);
    plotly().restyle(this.el, { visible: flags });
  }

  pointCount() {
    return this.drawn ? this.el.data[this.traceOf.values().next().value].x.length : 0;
  }

  destroy() {
    purge(this.el);
  }
}
