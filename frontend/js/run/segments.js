// Segment allocation: which TEBs sit on which device. A heatmap of δ_k (num_blocks) per device over
// rounds (white: none, dark blue: all L), and the latest round's cut of the model's blocks — the
// encoder's layers, or a decoder-only model's decoder layers — per cluster as stacked bars (segments
// are contiguous in device order; a device that recomputes its activations is marked ↻).
// Live rounds are batched: on screen both charts redraw at most once per HEATMAP_REFRESH_MS; off
// screen every OFFSCREEN_REFRESH_MS when the page is idle, so that a page nobody scrolled (a
// full-page screenshot, a printout, a window the charts do not fit) is never stale for long.

import { h } from '../dom.js';
import { PLOT_CONFIG, baseLayout, deviceColor, plotly, purge } from '../plot.js';
import { RECOMPUTE_MARK, RECOMPUTE_NOTE, recomputingDevices } from './recompute.js';

const HEATMAP_REFRESH_MS = 1000;
const OFFSCREEN_REFRESH_MS = 2000;
// ColorBrewer's Blues: 0 TEBs white, all of them dark
const COLORSCALE = [[0, '#f7fbff'], [0.25, '#c6dbef'], [0.5, '#6baed6'], [0.75, '#2171b5'], [1, '#08306b']];

/** What a model's TEBs are: a decoder-only LLM's decoder layers, any other model's encoder layers. */
export function stackName(model) {
  return model?.kind === 'causal_lm' ? 'decoder' : 'encoder';
}

/** Run ``fn`` when the browser is idle (within ``timeout`` ms); returns a cancel function. */
function whenIdle(fn, timeout) {
  if (window.requestIdleCallback) {
    const id = requestIdleCallback(fn, { timeout });
    return () => cancelIdleCallback(id);
  }
  const id = setTimeout(fn, 0);
  return () => clearTimeout(id);
}

export class SegmentCharts {
  /** ``devices``: every device id in order; ``config``: the run's (network shape, model, recomputation). */
  constructor(devices, config) {
    this.config = config;
    this.numBlocks = config.model.num_blocks;
    this.devices = devices;
    this.perCluster = config.network.devices_per_cluster;
    this.stack = stackName(config.model);
    this.heatEl = h('div.chart.chart-tall', { id: 'chart-segments', 'data-chart': 'segments', role: 'img', 'aria-label': 'TEBs per device over rounds' });
    this.cutEl = h('div.chart', { id: 'chart-cut', 'data-chart': 'cut', role: 'img', 'aria-label': `latest cut of the ${this.stack} per cluster` });
    this.cutNote = h('p.chart-note', {}, `The ${this.stack}'s TEBs by device in the latest round.`);
    this.panels = [
      h('section.chart-panel', {}, h('h3', {}, 'Segment allocation over rounds'),
        h('p.chart-note', {}, 'num_blocks δ_k held by each device (rows) in each round (columns); white: none'), this.heatEl),
      h('section.chart-panel', {}, h('h3', {}, `Current cut of the ${this.stack}`), this.cutNote, this.cutEl),
    ];
    this.x = [];
    this.z = devices.map(() => []);
    this.timer = null; // the next redraw's timeout
    this.cancelIdle = null; // off screen: the next redraw waiting for an idle period
    this.dirty = false;
    this.drawn = false;
    this.latestCut = null; // {round, decision} or {round, devices} of the newest live round
  }

  draw(history) {
    const first = history[this.devices[0]];
    this.x = first ? first.round.slice() : [];
    this.z = this.devices.map((d) => (history[d] ? history[d].value.slice() : []));
    plotly().newPlot(this.heatEl, [this.heatTrace()], this.heatLayout(), PLOT_CONFIG);
    this.drawn = true;
  }

  heatLayout() {
    return baseLayout({
      margin: { l: 64, r: 12, t: 8, b: 40 },
      xaxis: { title: { text: 'round' }, gridcolor: '#eef1f5', zeroline: false, automargin: true },
      yaxis: { type: 'category', autorange: 'reversed', automargin: true, tickfont: { size: 10 } },
    });
  }

  heatTrace() {
    // new arrays each time: Plotly.react redraws only data whose references changed
    return {
      type: 'heatmap', x: this.x.slice(), y: this.devices, z: this.z.map((row) => row.slice()), colorscale: COLORSCALE,
      zmin: 0, zmax: this.numBlocks, colorbar: { title: { text: 'TEBs', side: 'right' }, thickness: 12, outlinewidth: 1, outlinecolor: '#dde3ea' },
      hovertemplate: '%{y}<br>round %{x}<br>δ = %{z}<extra></extra>', xgap: 0, ygap: 1,
    };
  }

  /** Add live rounds; both charts redraw on the schedule above. */
  extend(rounds) {
    if (!this.drawn || !rounds.length) return;
    const positions = new Map(this.devices.map((d, i) => [d, i]));
    for (const event of rounds) {
      this.x.push(event.round.round);
      const column = new Array(this.devices.length).fill(null);
      for (const device of event.devices) {
        const i = positions.get(device.device_id);
        if (i !== undefined) column[i] = device.num_blocks;
      }
      column.forEach((v, i) => this.z[i].push(v));
    }
    const latest = rounds[rounds.length - 1];
    this.latestCut = latest.round.decision?.clusters
      ? { round: latest.round.round, decision: latest.round.decision }
      : { round: latest.round.round, devices: latest.devices };
    this.dirty = true;
    this.schedule();
  }

  /** The next redraw: in HEATMAP_REFRESH_MS on screen (or ``delay``), off screen in
   * OFFSCREEN_REFRESH_MS once the page is idle. A redraw of the heatmap and the bars takes tens of
   * milliseconds: batching keeps the charts in view answering live rounds. */
  schedule(delay = HEATMAP_REFRESH_MS) {
    if (this.timer !== null || this.cancelIdle !== null || !this.dirty) return;
    const offscreen = this.visible === false;
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!offscreen) {
        this.redraw();
        return;
      }
      this.cancelIdle = whenIdle(() => {
        this.cancelIdle = null;
        this.redraw();
      }, OFFSCREEN_REFRESH_MS);
    }, offscreen ? OFFSCREEN_REFRESH_MS : delay);
  }

  cancel() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.cancelIdle !== null) this.cancelIdle();
    this.cancelIdle = null;
  }

  redraw() {
    this.dirty = false;
    plotly().react(this.heatEl, [this.heatTrace()], this.heatLayout(), PLOT_CONFIG);
    if (this.latestCut) this.showCut(this.latestCut);
  }

  /** The heatmap scrolled into view (redraw what is pending now) or out of it (slower cadence). */
  setVisible(visible) {
    if (this.visible === visible) return;
    this.visible = visible;
    this.cancel();
    this.schedule(0);
  }

  /** The latest decision from /decisions (history) — {round, decision: {clusters: [...]}}. */
  showDecision(item) {
    if (!item || !item.decision || !item.decision.clusters) return;
    this.showCut({ round: item.round, decision: item.decision });
  }

  /** The cut of a round: from its decision (which also says who recomputes) or its device records. */
  showCut({ round, decision, devices }) {
    const again = decision ? recomputingDevices(this.config, decision) : new Set();
    const cut = decision
      ? decision.clusters.flatMap((c) => c.devices.map((d) => ({ device: d.device, cluster: c.cluster, blocks: d.num_blocks })))
      : devices.map((d) => ({ device: d.device_id, cluster: d.cluster, blocks: d.num_blocks }));
    this.cutNote.textContent = `The ${this.stack}'s TEBs by device (in pipeline order) in round ${round}`
      + `${again.size ? `; ${RECOMPUTE_MARK}: the device ${RECOMPUTE_NOTE}` : ''}.`;
    const key = JSON.stringify([cut, [...again]]);
    if (key === this.cutKey) return; // the allocation drawn already: no redraw
    this.cutKey = key;
    const clusters = [...new Set(cut.map((c) => c.cluster))].sort((a, b) => a - b);
    const labels = clusters.map((c) => `cluster ${c}`);
    const byDeviceIndex = new Map();
    for (const c of cut) {
      const k = Number(String(c.device).split('-d')[1]);
      if (!byDeviceIndex.has(k)) byDeviceIndex.set(k, new Map());
      byDeviceIndex.get(k).set(c.cluster, c);
    }
    const traces = [...byDeviceIndex.keys()].sort((a, b) => a - b).map((k) => {
      const of = clusters.map((c) => byDeviceIndex.get(k).get(c));
      const mark = (c) => (c && again.has(c.device) ? RECOMPUTE_MARK : '');
      return {
        type: 'bar', orientation: 'h', name: `device ${k}`, y: labels,
        x: of.map((c) => c?.blocks ?? 0),
        text: of.map((c) => `d${k}: ${c?.blocks ?? 0}${mark(c)}`), textposition: 'inside', insidetextanchor: 'middle',
        customdata: of.map((c) => (c && again.has(c.device) ? `<br>${RECOMPUTE_MARK} ${RECOMPUTE_NOTE}` : '')),
        marker: { color: deviceColor(k, Math.max(this.perCluster, 1)) },
        hovertemplate: `%{y} · device ${k}<br>%{x} TEBs%{customdata}<extra></extra>`,
      };
    });
    const layout = baseLayout({
      barmode: 'stack', showlegend: false,
      margin: { l: 70, r: 12, t: 8, b: 40 },
      xaxis: { title: { text: `TEBs (${this.stack} order)` }, gridcolor: '#eef1f5', dtick: 1, automargin: true },
      yaxis: { autorange: 'reversed', automargin: true },
    });
    plotly().react(this.cutEl, traces, layout, PLOT_CONFIG);
  }

  destroy() {
    this.cancel();
    purge(this.heatEl);
    purge(this.cutEl);
  }
}
