// Per-device charts over rounds or modeled elapsed time (X_AXES), as subplots of plotly figures
// (DEVICE_FIGURES: the first three charts in one figure, the last three in another). Up to
// GROUP_ABOVE devices, one trace per device and series (shared legend); with more, one trace per
// cluster and series, the cluster's devices separated by null gaps so each stays its own line (hover
// names the device from ``text``).
// plotly.js pays a fixed cost per trace on every redraw (defaults, calc, an SVG group), so 50 devices
// are 10 cluster traces per series instead of 50.
//
// History comes downsampled from GET /api/runs/{id}/devices. Every device's series is kept here
// (this.series); a live batch of rounds is appended to them and the changed traces get their new
// arrays, then one Plotly.redraw of the figure (what Plotly.extendTraces does after appending). A
// live redraw costs plotly.js a full replot of the figure, mostly fixed per subplot and per trace,
// plus a part per point. Hence: two figures, so that only the one on screen redraws (the run view
// redraws off-screen figures when the page is idle or when they scroll into view), the axes are
// liveAxis() with few ticks (no tick label measuring), and live series are thinned in their older
// part beyond DEVICE_SERIES_POINTS points per device (thinTrace).
//
// Devices are loaded on demand (a big network opens on one cluster): addDevices() adds them.
// Constant per-device lines (capacity, budget) are one trace of segments per chart, a segment per
// value (devices of the same capacity share a line; hover names them), and measured values
// (distributed executor) one marker trace. A chart of bytes (memory) has its ticks and hover texts in
// the units of the page's tiles (axes.js: KiB, MiB, GiB), its ticks following the range drawn.

import { h } from '../dom.js';
import { axisFormat } from '../format.js';
import { byteTicks, bytesText } from './axes.js';
import {
  PLOT_CONFIG, X_AXES, baseLayout, deviceColor, liveAxis, plotly, purge, swapX, thinTrace, xAxisLayout, xPair,
} from '../plot.js';

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
    note: 'solid: modeled memory_bytes · grey dashed: memory_capacity_bytes (a line per capacity; hover names its devices) · open circles: measured peak RSS of the device\'s whole process (distributed executor; Python and torch included, which the model counts as runtime_overhead_bytes)',
    series: [{ metric: 'memory_bytes' }],
    limit: { metric: 'memory_capacity_bytes', name: 'capacity' },
    measured: { name: 'measured process peak RSS', value: measuredMemory },
  },
  {
    id: 'energy', title: 'Energy vs budget', unit: 'J',
    note: 'solid: energy_j (modeled) · grey dashed: energy_budget_j Ē_k (a line per budget; hover names its devices)',
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

/** The per-device figures: which charts of DEVICE_CHARTS each one holds (as subplots). */
export const DEVICE_FIGURES = [
  { id: 'devices', charts: ['queue', 'latency', 'memory'] },
  { id: 'devices-2', charts: ['energy', 'bandwidth', 'power'] },
];

/** A live device series is thinned in its older part beyond this many points (the history comes
 * at 200 per device; a subplot is ~1,300 px wide, and every point costs on each live redraw). */
export const DEVICE_SERIES_POINTS = 400;

/** Device metrics whose history is served downsampled (GET /devices?metric=...). */
export function seriesMetrics() {
  return [...new Set(DEVICE_CHARTS.flatMap((c) => c.series.map((s) => s.metric)))];
}

/** Constant per-device metrics: two points (first and last round) are the whole series. */
export function limitMetrics() {
  return DEVICE_CHARTS.filter((c) => c.limit).map((c) => c.limit.metric);
}

// Figure geometry (px): every subplot has the same height, with its title in the gap above it.
const SUBPLOT_HEIGHT = 150;
const TITLE_GAP = 34; // the subplot's title (a heading over the figure)
const FIGURE_TOP = 30; // the shared legend (up to 8 devices)
const FIGURE_BOTTOM = 40;

/** With more devices than this, a trace per cluster and series instead of one per device. */
export const GROUP_ABOVE = 8;

/** Devices named on a shared limit line: all of them up to LIMIT_NAMES, then how many more. */
const LIMIT_NAMES = 8;

function deviceList(devices) {
  if (devices.length <= LIMIT_NAMES) return devices.join(', ');
  return `${devices.slice(0, LIMIT_NAMES).join(', ')} and ${devices.length - LIMIT_NAMES} more`;
}

/** The cluster of a device id ('c3-d1' -> 'c3'). */
function clusterOf(device) {
  const dash = device.indexOf('-');
  return dash < 0 ? device : device.slice(0, dash);
}

/**
 * Per-device charts as one plotly.js figure: one subplot per chart of ``defs``, stacked, sharing the
 * x axis (``axis``: round or modeled elapsed time, setXAxis() switches), each with its own y axis and
 * title. A live redraw of one figure costs plotly.js less than one figure per chart: the fixed part
 * of a replot (defaults, axes, trace setup) is paid once. The figure's element is ``#chart-<id>``,
 * its ``data-charts`` lists the charts it holds. Each device trace carries ``meta`` = {chart, metric, device} (one device) or
 * {chart, metric, cluster, devices} (a cluster's devices; ``text`` names each point's device), the
 * limit and measured traces {chart, kind}.
 */
export class DeviceCharts {
  constructor(defs, allDevices, id = 'devices', axis = 'round') {
    this.defs = defs;
    this.axis = axis;
    this.allDevices = allDevices;
    this.grouped = allDevices.length > GROUP_ABOVE;
    this.colorIndex = new Map(allDevices.map((d, i) => [d, i]));
    const clusters = [...new Set(allDevices.map(clusterOf))];
    this.clusterIndex = new Map(clusters.map((c, i) => [c, i]));
    // `${chart}|${seriesIndex}|${device}` -> {x, y, customdata}: the device's points, x on this.axis
    // and customdata on the other (round or elapsed time)
    this.series = new Map();
    this.specs = []; // per device trace: {index, chart, si, key, devices}
    this.specOf = new Map(); // `${chart}|${seriesIndex}|${device or cluster}` -> spec
    this.limitValue = new Map(defs.map((def) => [def.id, new Map()])); // chart -> device -> constant limit
    this.fixedIndex = new Map(); // `${chart}|limit` or `${chart}|measured` -> trace index
    // charts of bytes: chart -> {lo, hi} of the values drawn, and the range their ticks were made for
    this.byteRange = new Map(defs.filter((d) => d.unit === 'bytes').map((def) => [def.id, { lo: Infinity, hi: -Infinity, ticked: null }]));
    this.loaded = new Set(); // devices with traces
    this.lastRound = 0;
    this.lastElapsed = 0; // modeled elapsed time at the end of lastRound
    this.showLegend = !this.grouped;
    this.height = FIGURE_TOP + defs.length * (TITLE_GAP + SUBPLOT_HEIGHT) + FIGURE_BOTTOM;
    this.el = h('div.chart.chart-stack', {
      id: `chart-${id}`, 'data-chart': id, 'data-charts': defs.map((d) => d.id).join(' '), role: 'img',
      style: `height: ${this.height}px`,
      'aria-label': `Per device over rounds: ${defs.map((d) => d.title).join('; ')}`,
    });
    // each subplot's title is a heading laid over the figure, in the gap above the subplot: text in
    // the figure itself (annotations) would be measured by plotly.js on every live redraw
    const titles = defs.map((def, i) => h('h3.subplot-title', {
      id: `title-${def.id}`, 'data-chart-title': def.id, style: `top: ${FIGURE_TOP + i * (TITLE_GAP + SUBPLOT_HEIGHT) + 15}px`,
    }, def.title));
    this.panel = h('section.chart-panel', { 'aria-labelledby': `title-${id}` },
      h('h3.sr-only', { id: `title-${id}` }, `Per device over rounds: ${defs.map((d) => d.title).join('; ')}`),
      h('ul.chart-notes', {}, defs.map((def) => h('li', { 'data-chart-note': def.id }, h('strong', {}, def.title), ': ', def.note))),
      h('div.chart-stack-box', {}, this.el, titles));
    this.drawn = false;
  }

  /** A device's colour; with a trace per cluster, its cluster's colour. */
  color(device) {
    if (this.grouped) return deviceColor(this.clusterIndex.get(clusterOf(device)), this.clusterIndex.size);
    return deviceColor(this.colorIndex.get(device), this.allDevices.length);
  }

  /** Plotly's id of the y axis of the chart at ``index`` ('y', 'y2', ...). */
  static yId(index) {
    return index === 0 ? 'y' : `y${index + 1}`;
  }

  /** The points a device trace draws: its device's series, or its devices' series with null gaps. */
  fill(trace, spec) {
    if (!this.grouped) {
      const own = this.series.get(`${spec.chart}|${spec.si}|${spec.devices[0]}`);
      trace.x = own.x;
      trace.y = own.y;
      trace.customdata = own.customdata;
      if (this.byteRange.has(spec.chart)) trace.hovertext = own.y.map(bytesText);
      return;
    }
    let x = [];
    let y = [];
    let customdata = [];
    let text = [];
    for (const device of spec.devices) {
      const own = this.series.get(`${spec.chart}|${spec.si}|${device}`);
      if (!own.x.length) continue;
      if (x.length) { x.push(null); y.push(null); customdata.push(null); text.push(null); }
      x = x.concat(own.x);
      y = y.concat(own.y);
      customdata = customdata.concat(own.customdata);
      text = text.concat(new Array(own.x.length).fill(device));
    }
    trace.x = x;
    trace.y = y;
    trace.customdata = customdata;
    trace.text = text;
    if (this.byteRange.has(spec.chart)) trace.hovertext = y.map(bytesText);
  }

  /** How hover shows a value of chart ``chartId``: as plotly.js formats it, or (bytes) its hovertext. */
  hoverValue(chartId) {
    return this.byteRange.has(chartId) ? '%{hovertext}' : '%{y}';
  }

  /** A device trace's hover text: its device (a cluster's: each point's, from text), metric, x. */
  hover(spec) {
    const metric = this.defs.find((d) => d.id === spec.chart).series[spec.si].metric;
    return `${this.grouped ? '%{text}' : spec.key} · ${metric}<br>${X_AXES[this.axis].hover}<br>${this.hoverValue(spec.chart)}<extra></extra>`;
  }

  /** The measured trace's hover text. */
  measuredHover(def) {
    return `%{text} · measured<br>${X_AXES[this.axis].hover}<br>${this.hoverValue(def.id)}<extra></extra>`;
  }

  /** Values of chart ``chartId`` about to be drawn: a chart of bytes widens its range to them. */
  widen(chartId, values) {
    const range = this.byteRange.get(chartId);
    if (!range) return;
    for (const v of values) {
      if (v === null || v === undefined || !Number.isFinite(v)) continue;
      if (v < range.lo) range.lo = v;
      if (v > range.hi) range.hi = v;
    }
  }

  /** The y axis fields of chart ``def`` at ``index``: ticks in the page's byte units, or the unit's format. */
  yAxisFormat(def) {
    const range = this.byteRange.get(def.id);
    if (!range) return axisFormat(def.unit);
    range.ticked = [range.lo, range.hi];
    return { tickmode: 'array', ...byteTicks(range.lo, range.hi), hoverformat: '' };
  }

  /** The ticks of the charts of bytes whose range grew since they were made, in the drawn layout. */
  refreshTicks() {
    this.defs.forEach((def, i) => {
      const range = this.byteRange.get(def.id);
      if (!range || (range.ticked && range.ticked[0] === range.lo && range.ticked[1] === range.hi)) return;
      Object.assign(this.el.layout[i === 0 ? 'yaxis' : `yaxis${i + 1}`], this.yAxisFormat(def));
    });
  }

  /** Keep the series of ``devices`` from ``history``; the device traces (new ones) they need. */
  deviceTraces(history, devices, firstIndex) {
    const traces = [];
    const changed = new Set();
    const other = this.axis === 'round' ? 'elapsed_s' : 'round'; // the series' list kept as customdata
    this.defs.forEach((def, ci) => {
      def.series.forEach((s, si) => {
        for (const device of devices) {
          const data = history[s.metric]?.[device];
          const last = data ? data.round.length - 1 : -1;
          if (last >= 0 && data.round[last] >= this.lastRound) {
            this.lastRound = data.round[last];
            this.lastElapsed = data.elapsed_s[last];
          }
          this.series.set(`${def.id}|${si}|${device}`, {
            x: data ? data[this.axis].slice() : [], y: data ? data.value.slice() : [], customdata: data ? data[other].slice() : [],
          });
          if (data) this.widen(def.id, data.value);
          const key = this.grouped ? clusterOf(device) : device;
          let spec = this.specOf.get(`${def.id}|${si}|${key}`);
          if (spec) {
            spec.devices.push(device);
            spec.devices.sort((a, b) => this.colorIndex.get(a) - this.colorIndex.get(b));
            changed.add(spec);
            continue;
          }
          spec = { index: firstIndex + traces.length, chart: def.id, si, key, devices: [device] };
          this.specs.push(spec);
          this.specOf.set(`${def.id}|${si}|${key}`, spec);
          const trace = {
            type: 'scatter', mode: 'lines', name: key, legendgroup: key,
            showlegend: this.showLegend && ci === 0 && si === 0, connectgaps: false,
            xaxis: 'x', yaxis: DeviceCharts.yId(ci),
            meta: this.grouped ? { chart: def.id, metric: s.metric, cluster: key, devices: spec.devices } : { chart: def.id, metric: s.metric, device },
            x: [], y: [],
            line: { color: this.color(device), width: this.grouped ? 1.3 : 1.6, dash: s.dash || 'solid' },
            hovertemplate: this.hover(spec),
          };
          traces.push(trace);
          spec.trace = trace;
        }
      });
      if (def.limit) {
        for (const device of devices) {
          const data = history[def.limit.metric]?.[device];
          if (data && data.value.length) this.limitValue.get(def.id).set(device, data.value[data.value.length - 1]);
          if (data) this.widen(def.id, data.value);
        }
      }
    });
    devices.forEach((d) => this.loaded.add(d));
    for (const spec of this.specs) {
      if (spec.trace && (changed.has(spec) || spec.index >= firstIndex)) this.fill(spec.trace, spec);
    }
    return traces;
  }

  /** The limit lines (capacity, budget) of the loaded devices of a chart: one trace, a segment per
   * value (the devices of that value named in its text), null between segments. */
  limitSegments(def) {
    const x = [];
    const y = [];
    const text = [];
    const end = this.axis === 'round' ? this.lastRound : this.lastElapsed;
    const byValue = new Map();
    for (const [device, value] of this.limitValue.get(def.id)) {
      if (value === null || value === undefined) continue;
      if (!byValue.has(value)) byValue.set(value, []);
      byValue.get(value).push(device);
    }
    for (const [value, devices] of byValue) {
      const names = deviceList(devices);
      x.push(0, end, null);
      y.push(value, value, null);
      text.push(names, names, null);
    }
    return { x, y, text, ...(this.byteRange.has(def.id) ? { hovertext: y.map(bytesText) } : {}) };
  }

  layout() {
    const n = this.defs.length;
    const area = n * (TITLE_GAP + SUBPLOT_HEIGHT); // the plot area: margins excluded
    const layout = baseLayout({
      height: this.height,
      showlegend: this.showLegend,
      margin: { l: 58, r: 12, t: FIGURE_TOP, b: FIGURE_BOTTOM },
      xaxis: liveAxis({ nticks: 8, ...xAxisLayout(this.axis), anchor: DeviceCharts.yId(n - 1) }),
    });
    this.defs.forEach((def, i) => {
      const top = 1 - (i * (TITLE_GAP + SUBPLOT_HEIGHT) + TITLE_GAP) / area;
      const bottom = 1 - ((i + 1) * (TITLE_GAP + SUBPLOT_HEIGHT)) / area;
      layout[i === 0 ? 'yaxis' : `yaxis${i + 1}`] = liveAxis({ nticks: 4, ...this.yAxisFormat(def), anchor: 'x', domain: [Math.max(0, bottom), top] });
    });
    return layout;
  }

  /** First draw: per chart its limit and measured traces (if any), then the device traces. */
  draw(history, devices) {
    const head = [];
    this.defs.forEach((def, ci) => {
      const yaxis = DeviceCharts.yId(ci);
      if (def.limit) {
        this.fixedIndex.set(`${def.id}|limit`, head.length);
        head.push({
          type: 'scatter', mode: 'lines', name: def.limit.name, connectgaps: false, xaxis: 'x', yaxis,
          meta: { chart: def.id, kind: 'limit', metric: def.limit.metric }, x: [], y: [], text: [],
          line: { color: '#8a97a6', width: 1, dash: 'dash' }, showlegend: false,
          hovertemplate: `%{text} · ${def.limit.metric}<br>${this.hoverValue(def.id)}<extra></extra>`,
        });
      }
      if (def.measured) {
        this.fixedIndex.set(`${def.id}|measured`, head.length);
        head.push({
          type: 'scatter', mode: 'markers', name: def.measured.name, x: [], y: [], customdata: [], text: [], hovertext: [], showlegend: false,
          xaxis: 'x', yaxis, meta: { chart: def.id, kind: 'measured' },
          marker: { size: 7, color: [], symbol: 'circle-open', line: { width: 2 } },
          hovertemplate: this.measuredHover(def),
        });
      }
    });
    const traces = this.deviceTraces(history, devices, head.length);
    const data = [...head, ...traces];
    this.refreshLimits(data);
    plotly().newPlot(this.el, data, this.layout(), PLOT_CONFIG);
    this.bind();
    this.drawn = true;
  }

  /** Point the specs at the figure's own trace objects (plotly.js keeps the ones it was given). */
  bind() {
    for (const spec of this.specs) spec.trace = this.el.data[spec.index];
  }

  /** Add devices loaded later (another cluster), from their history. */
  addDevices(history, devices) {
    const fresh = devices.filter((d) => !this.loaded.has(d));
    if (!fresh.length) return;
    const traces = this.deviceTraces(history, fresh, this.el.data.length);
    this.refreshLimits(this.el.data);
    this.refreshTicks();
    if (traces.length) plotly().addTraces(this.el, traces);
    else plotly().redraw(this.el);
    this.bind();
  }

  refreshLimits(data) {
    for (const def of this.defs) {
      if (!def.limit) continue;
      Object.assign(data[this.fixedIndex.get(`${def.id}|limit`)], this.limitSegments(def));
    }
  }

  /** Append ``rounds`` (live events {round: RoundRecord, devices: [DeviceRecord], elapsed_s}: the
   * view's running modeled time at the end of the round, null if not known — then the round is not
   * drawn against time); one redraw of the figure.
   * ``only``: a set of device ids to append for (devices just loaded), default all loaded ones. */
  extend(rounds, only = null) {
    if (!this.drawn || !rounds.length) return;
    const data = this.el.data;
    const roundIds = rounds.map((event) => event.round.round);
    const points = rounds.map((event) => xPair(this.axis, event.round.round, event.elapsed_s ?? null));
    const changed = new Set();
    for (const def of this.defs) {
      def.series.forEach((s, si) => {
        const columns = new Map();
        rounds.forEach((event, r) => {
          if (points[r][0] === null) return;
          for (const device of event.devices) {
            if (only && !only.has(device.device_id)) continue;
            const key = `${def.id}|${si}|${device.device_id}`;
            const value = device[s.metric];
            if (!this.series.has(key) || value === null || value === undefined) continue;
            let column = columns.get(key);
            if (!column) { column = { x: [], y: [], customdata: [] }; columns.set(key, column); }
            column.x.push(points[r][0]);
            column.y.push(value);
            column.customdata.push(points[r][1]);
          }
        });
        for (const [key, column] of columns) {
          const own = this.series.get(key);
          this.widen(def.id, column.y);
          thinTrace(own, column.x.length, DEVICE_SERIES_POINTS);
          own.x.push(...column.x);
          own.y.push(...column.y);
          own.customdata.push(...column.customdata);
          const device = key.slice(key.lastIndexOf('|') + 1);
          changed.add(this.specOf.get(`${def.id}|${si}|${this.grouped ? clusterOf(device) : device}`));
        }
      });
    }
    if (roundIds[roundIds.length - 1] >= this.lastRound) {
      this.lastRound = roundIds[roundIds.length - 1];
      this.lastElapsed = rounds[rounds.length - 1].elapsed_s ?? this.lastElapsed;
    }
    const newest = rounds[rounds.length - 1].devices;
    for (const def of this.defs) {
      if (def.limit) {
        for (const device of newest) {
          if (!this.loaded.has(device.device_id)) continue;
          this.limitValue.get(def.id).set(device.device_id, device[def.limit.metric]);
          this.widen(def.id, [device[def.limit.metric]]);
        }
      }
      if (def.measured) this.extendMeasured(def, rounds, only);
    }
    this.refreshLimits(data);
    this.refreshTicks();
    for (const spec of changed) this.fill(spec.trace, spec);
    // the traces' new arrays are in place: one redraw (what Plotly.extendTraces does after appending)
    if (changed.size) plotly().redraw(this.el);
  }

  /** Measured figures of stored rounds ([{round, elapsed_s, measured: {participant: figures}}], from
   * the decision log API; elapsed_s as the view knows it, null if not). */
  addMeasuredHistory(items) {
    const defs = this.defs.filter((def) => def.measured);
    if (!this.drawn || !defs.length || !items.length) return;
    const events = items.map((item) => ({
      round: { round: item.round },
      elapsed_s: item.elapsed_s,
      devices: Object.entries(item.measured).map(([id, measured]) => ({ device_id: id, measured })),
    }));
    for (const def of defs) this.extendMeasured(def, events, null);
    this.refreshTicks();
    plotly().redraw(this.el);
  }

  extendMeasured(def, rounds, only) {
    const trace = this.el.data[this.fixedIndex.get(`${def.id}|measured`)];
    for (const event of rounds) {
      const [x, customdata] = xPair(this.axis, event.round.round, event.elapsed_s ?? null);
      if (x === null) continue;
      for (const device of event.devices) {
        const value = def.measured.value(device);
        if (value === null || !this.loaded.has(device.device_id)) continue;
        if (only && !only.has(device.device_id)) continue;
        trace.x.push(x);
        trace.customdata.push(customdata);
        trace.y.push(value);
        if (this.byteRange.has(def.id)) trace.hovertext.push(bytesText(value));
        trace.text.push(device.device_id);
        this.widen(def.id, [value]);
        trace.marker.color.push(this.color(device.device_id));
      }
    }
    // in the legend once it has points (runs of executors that measure nothing show no entry)
    trace.showlegend = trace.x.length > 0;
  }

  /** Draw against ``axis`` from now on: every series and the measured points trade x and customdata,
   * the limit lines span the new range, the axis is reset; one redraw. */
  setXAxis(axis) {
    if (axis === this.axis) return;
    this.axis = axis;
    for (const own of this.series.values()) swapX(own);
    if (!this.drawn) return;
    for (const spec of this.specs) {
      this.fill(spec.trace, spec);
      spec.trace.hovertemplate = this.hover(spec);
    }
    for (const def of this.defs.filter((d) => d.measured)) {
      const trace = this.el.data[this.fixedIndex.get(`${def.id}|measured`)];
      swapX(trace);
      trace.hovertemplate = this.measuredHover(def);
    }
    this.refreshLimits(this.el.data);
    Object.assign(this.el.layout.xaxis, xAxisLayout(axis), { autorange: true });
    plotly().redraw(this.el);
  }

  /** Show only the devices ``visible(deviceId)`` accepts (limit and measured traces always shown);
   * a cluster trace shows while any of its devices is accepted (the filter picks whole clusters). */
  filter(visible) {
    if (!this.drawn) return;
    const flags = this.el.data.map(() => true);
    for (const spec of this.specs) flags[spec.index] = spec.devices.some((d) => visible(d));
    plotly().restyle(this.el, { visible: flags });
  }

  destroy() {
    purge(this.el);
  }
}
