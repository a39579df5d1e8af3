// Segment allocation: which TEBs sit on which device. A heatmap of δ_k (num_blocks) per device over
// rounds, and the latest round's cut of the encoder per cluster as stacked bars (segments are
// contiguous in device order). Live rounds are batched into at most one heatmap update a second.

import { h } from '../dom.js';
import { PLOT_CONFIG, baseLayout, deviceColor, plotly, purge } from '../plot.js';

const HEATMAP_REFRESH_MS = 1000;

export class SegmentCharts {
  constructor(devices, numClusters, devicesPerCluster, numBlocks) {
    this.numBlocks = numBlocks;
    this.devices = devices;
    this.perCluster = devicesPerCluster;
    this.numClusters = numClusters;
    this.heatEl = h('div.chart.chart-tall', { id: 'chart-segments', 'data-chart': 'segments', role: 'img', 'aria-label': 'TEBs per device over rounds' });
    this.cutEl = h('div.chart', { id: 'chart-cut', 'data-chart': 'cut', role: 'img', 'aria-label': 'latest segment allocation per cluster' });
    this.cutNote = h('p.chart-note', {}, 'The encoder\'s TEBs by device in the latest round.');
    this.panels = [
      h('section.chart-panel', {}, h('h3', {}, 'Segment allocation over rounds'),
        h('p.chart-note', {}, 'num_blocks δ_k held by each device (rows) in each round (columns)'), this.heatEl),
      h('section.chart-panel', {}, h('h3', {}, 'Current cut of the encoder'), this.cutNote, this.cutEl),
    ];
    this.x = [];
    this.z = devices.map(() => []);
    this.timer = null;
    this.drawn = false;
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
      type: 'heatmap', x: this.x.slice(), y: this.devices, z: this.z.map((row) => row.slice()), colorscale: 'Blues', reversescale: false,
      zmin: 0, zmax: this.numBlocks, colorbar: { title: { text: 'TEBs', side: 'right' }, thickness: 12 },
      hovertemplate: '%{y}<br>round %{x}<br>δ = %{z}<extra></extra>', xgap: 0, ygap: 1,
    };
  }

  /** Add live rounds; both charts redraw at most once per HEATMAP_REFRESH_MS. */
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
    this.latestCut = [latest.devices.map((d) => ({ device: d.device_id, cluster: d.cluster, blocks: d.num_blocks })), latest.round.round];
    this.dirty = true;
    this.schedule();
  }

  /** Redraw at most once per HEATMAP_REFRESH_MS while on screen; off screen not at all (a redraw
   * of the heatmap and the bars takes tens of milliseconds, which would hold up the next live
   * round on the charts in view): they catch up as soon as they scroll into view. */
  schedule(delay = HEATMAP_REFRESH_MS) {
    if (this.timer || !this.dirty || this.visible === false) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.dirty = false;
      plotly().react(this.heatEl, [this.heatTrace()], this.heatLayout(), PLOT_CONFIG);
      if (this.latestCut) this.showCut(...this.latestCut);
    }, delay);
  }

  setVisible(visible) {
    this.visible = visible;
    if (!visible && this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.schedule(0);
  }

  /** The latest decision from /decisions (history) — {round, decision: {clusters: [...]}}. */
  showDecision(item) {
    if (!item || !item.decision || !item.decision.clusters) return;
    const cut = [];
    for (const c of item.decision.clusters) {
      for (const d of c.devices) cut.push({ device: d.device, cluster: c.cluster, blocks: d.num_blocks });
    }
    this.showCut(cut, item.round);
  }

  showCut(cut, round) {
    this.cutNote.textContent = `The encoder's TEBs by device (in pipeline order) in round ${round}.`;
    const key = JSON.stringify(cut);
    if (key === this.cutKey) return; // the allocation drawn already: no redraw
    this.cutKey = key;
    const clusters = [...new Set(cut.map((c) => c.cluster))].sort((a, b) => a - b);
    const labels = clusters.map((c) => `cluster ${c}`);
    const byDeviceIndex = new Map();
    for (const c of cut) {
      const k = Number(String(c.device).split('-d')[1]);
      if (!byDeviceIndex.has(k)) byDeviceIndex.set(k, new Map());
      byDeviceIndex.get(k).set(c.cluster, c.blocks);
    }
    const traces = [...byDeviceIndex.keys()].sort((a, b) => a - b).map((k) => ({
      type: 'bar', orientation: 'h', name: `device ${k}`, y: labels,
      x: clusters.map((c) => byDeviceIndex.get(k).get(c) ?? 0),
      text: clusters.map((c) => `d${k}: ${byDeviceIndex.get(k).get(c) ?? 0}`), textposition: 'inside', insidetextanchor: 'middle',
      marker: { color: deviceColor(k, Math.max(this.perCluster, 1)) },
      hovertemplate: `%{y} · device ${k}<br>%{x} TEBs<extra></extra>`,
    }));
    const layout = baseLayout({
      barmode: 'stack', showlegend: false,
      margin: { l: 70, r: 12, t: 8, b: 40 },
      xaxis: { title: { text: 'TEBs (encoder order)' }, gridcolor: '#eef1f5', dtick: 1, automargin: true },
      yaxis: { autorange: 'reversed', automargin: true },
    });
    plotly().react(this.cutEl, traces, layout, PLOT_CONFIG);
  }

  destroy() {
    clearTimeout(this.timer);
    purge(this.heatEl);
    purge(this.cutEl);
  }
}
