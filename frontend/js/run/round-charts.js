// Per-round curves: loss, eval metrics, perplexity (causal LM runs), round latency and the
// drift-plus-penalty objective terms. History from GET /api/runs/{id}/rounds?fields=...; live rounds
// appended with extendTraces.

import { h } from '../dom.js';
import { axisFormat } from '../format.js';
import { PLOT_CONFIG, baseLayout, liveAxis, plotly, purge, seriesColor, thinTrace } from '../plot.js';

const max = (values) => (values && values.length ? Math.max(...values) : null);

/** A round series' value from a live RoundRecord, by its API field name. */
export const FROM_RECORD = {
  train_loss: (r) => r.train_loss,
  eval_loss: (r) => r.eval_loss,
  eval_accuracy: (r) => r.eval_metrics?.eval_accuracy,
  eval_error_rate: (r) => r.eval_metrics?.eval_error_rate,
  eval_perplexity: (r) => r.eval_metrics?.eval_perplexity,
  latency_s: (r) => r.latency_s,
  makespan_s_max: (r) => max(r.makespan_s),
  aggregation_s: (r) => r.aggregation_s,
  objective_latency: (r) => r.objective_latency,
  objective_convergence: (r) => r.objective_convergence,
  objective_energy: (r) => r.objective_energy,
};

const EMPTY_NOTE = {
  text: 'no values (yet): the analytic executor trains nothing', showarrow: false,
  xref: 'paper', yref: 'paper', x: 0.5, y: 0.5, font: { color: '#5d6b7c' },
};

export const ROUND_CHARTS = [
  { id: 'loss', title: 'Loss', unit: '1', note: 'train_loss (mean over clusters) and eval_loss after FedAvg', fields: ['train_loss', 'eval_loss'] },
  { id: 'eval', title: 'Eval metrics', unit: '1', note: 'eval_accuracy, eval_error_rate (seq2seq) on the held-out set', fields: ['eval_accuracy', 'eval_error_rate'] },
  // perplexity runs from thousands down to tens: an axis of its own, logarithmic
  {
    id: 'perplexity', title: 'Eval perplexity', unit: '1', log: true, fields: ['eval_perplexity'],
    note: 'eval_perplexity = exp(token-weighted eval loss) on the held-out set; log scale',
    when: (config) => config.model.kind === 'causal_lm',
  },
  { id: 'round-latency', title: 'Round latency', unit: 's', note: 'latency_s (modeled), slowest cluster\'s makespan_s, aggregation_s', fields: ['latency_s', 'makespan_s_max', 'aggregation_s'] },
  { id: 'objective', title: 'Objective terms', unit: '1', note: 'V·T (objective_latency), V·λ·G(M), Σ Q_k·E_k', fields: ['objective_latency', 'objective_convergence', 'objective_energy'] },
];

/** The charts a run shows: every chart, and those a run's config asks for (perplexity: causal LM). */
export function roundChartsFor(config) {
  return ROUND_CHARTS.filter((c) => !c.when || c.when(config));
}

export function roundFields(charts = ROUND_CHARTS) {
  return charts.flatMap((c) => c.fields);
}

export class RoundChart {
  constructor(def) {
    this.def = def;
    this.el = h('div.chart', { id: `chart-${def.id}`, 'data-chart': def.id, role: 'img', 'aria-label': `${def.title} over rounds` });
    this.panel = h('section.chart-panel', {}, h('h3', {}, def.title), h('p.chart-note', {}, def.note), this.el);
    this.drawn = false;
  }

  draw(series) {
    const traces = this.def.fields.map((field, i) => ({
      type: 'scatter',
      mode: 'lines',
      name: field,
      x: series[field] ? series[field].round.slice() : [],
      y: series[field] ? series[field].value.slice() : [],
      line: { color: seriesColor(i), width: 2 },
      hovertemplate: `${field}<br>round %{x}<br>%{y}<extra></extra>`,
    }));
    this.empty = traces.every((t) => !t.x.length);
    const layout = baseLayout({
      showlegend: true,
      annotations: this.empty ? [EMPTY_NOTE] : [],
      margin: { l: 58, r: 12, t: 24, b: 40 },
      xaxis: liveAxis({ title: { text: 'round' } }),
      yaxis: liveAxis({ ...axisFormat(this.def.unit), ...(this.def.log ? { type: 'log', tickformat: '.3~s' } : {}) }),
    });
    plotly().newPlot(this.el, traces, layout, PLOT_CONFIG);
    this.drawn = true;
  }

  extend(rounds) {
    if (!this.drawn || !rounds.length) return;
    const xs = [];
    const ys = [];
    const indices = [];
    this.def.fields.forEach((field, i) => {
      const x = [];
      const y = [];
      for (const event of rounds) {
        const value = FROM_RECORD[field](event.round);
        if (value === null || value === undefined || Number.isNaN(value)) continue;
        x.push(event.round.round);
        y.push(value);
      }
      if (x.length) {
        thinTrace(this.el.data[i], x.length);
        xs.push(x);
        ys.push(y);
        indices.push(i);
      }
    });
    if (!indices.length) return;
    plotly().extendTraces(this.el, { x: xs, y: ys }, indices);
    if (this.empty) {
      this.empty = false;
      plotly().relayout(this.el, { annotations: [] });
    }
  }

  destroy() {
    purge(this.el);
  }
}
