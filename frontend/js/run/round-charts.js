// Per-round curves: loss, eval metrics (those of the run's task), perplexity (causal LM runs), the
// gradient noise scale, round latency (with its redistribution phase), the blocks moved and the
// drift-plus-penalty objective terms, against the round or the modeled elapsed time (X_AXES). History
// from GET /api/runs/{id}/rounds?fields=...; live rounds appended with extendTraces. A logarithmic
// axis takes its tick step from the values drawn (axes.js: no crowded labels).

import { h } from '../dom.js';
import { axisFormat } from '../format.js';
import { logAxisTicks, logTickStep } from './axes.js';
import {
  PLOT_CONFIG, X_AXES, baseLayout, liveAxis, plotly, purge, seriesColor, swapX, thinTrace, xAxisLayout, xPair,
} from '../plot.js';

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
  redistribution_s_max: (r) => max(r.redistribution_s),
  blocks_moved: (r) => r.blocks_moved,
  objective_latency: (r) => r.objective_latency,
  objective_convergence: (r) => r.objective_convergence,
  objective_energy: (r) => r.objective_energy,
  gradient_noise_scale: (r) => r.gradient_noise_scale,
};

/** The note an empty chart shows in its middle. */
const emptyNote = (text) => ({
  text, showarrow: false, xref: 'paper', yref: 'paper', x: 0.5, y: 0.5, font: { color: '#5d6b7c' },
});

/**
 * Why a chart of ``def`` has no values, from what the run is known to have done (``facts``):
 * ``executor``; ``roundsDone``, the rounds stored so far; ``multiMicrobatch``, whether a stored round
 * trained a cluster with M ≥ 2 micro-batches (null: not known). A chart of training figures
 * (``def.trains``) is empty for the analytic executor, which trains nothing; ``def.whyEmpty`` names
 * a chart's own reasons.
 */
export function emptyReason(def, facts) {
  if (def.trains && facts.executor === 'analytic') return 'no values: the analytic executor trains nothing';
  if (!facts.roundsDone) return 'no values yet: no round has finished';
  return (def.whyEmpty && def.whyEmpty(facts)) || 'no values in the rounds so far';
}

export const ROUND_CHARTS = [
  { id: 'loss', title: 'Loss', unit: '1', trains: true, note: 'train_loss (mean over clusters) and eval_loss after FedAvg', fields: ['train_loss', 'eval_loss'] },
  {
    id: 'eval', title: 'Eval metrics', unit: '1', trains: true, fields: ['eval_accuracy', 'eval_error_rate'],
    note: 'eval_accuracy and eval_error_rate on the held-out set',
    // what the run's task evaluates: error rates of greedy decoding for seq2seq models only
    forModel: (model) => ({
      seq2seq: { note: 'eval_accuracy (token accuracy) and eval_error_rate (error rate of greedy decoding) on the held-out set' },
      classifier: { note: 'eval_accuracy (label accuracy) on the held-out set', fields: ['eval_accuracy'] },
      causal_lm: { note: 'eval_accuracy (next-token accuracy) on the held-out set', fields: ['eval_accuracy'] },
    })[model.kind],
  },
  // perplexity runs from thousands down to tens: an axis of its own, logarithmic
  {
    id: 'perplexity', title: 'Eval perplexity', unit: '1', log: true, trains: true, fields: ['eval_perplexity'],
    note: 'eval_perplexity = exp(token-weighted eval loss) on the held-out set; log scale',
    when: (config) => config.model.kind === 'causal_lm',
  },
  // B_noise grows by orders of magnitude as the loss falls: a logarithmic axis
  {
    id: 'gradient-noise', title: 'Gradient noise scale', unit: '1', log: true, trains: true, fields: ['gradient_noise_scale'],
    note: 'B_noise = tr(Σ)/|G|² in samples, from micro-batch and accumulated gradient norms, averaged over rounds; log scale',
    // a step of M = 1 has one batch size only: nothing to compare its gradient with
    whyEmpty: ({ multiMicrobatch }) => {
      if (multiMicrobatch === false) return 'no values: every training step so far had M = 1 micro-batch;<br>B_noise needs a step of M ≥ 2 (it compares micro-batch gradients with their mean)';
      if (multiMicrobatch) return 'no values yet: the averaged |G|² is not positive<br>(the gradient\'s signal is not yet resolved from its noise)';
      return null;
    },
  },
  {
    id: 'round-latency', title: 'Round latency', unit: 's', fields: ['latency_s', 'makespan_s_max', 'aggregation_s', 'redistribution_s_max'],
    note: 'latency_s (modeled), slowest cluster\'s makespan_s, aggregation_s, longest redistribution_s (the averaged model, moved optimizer state and segments sent before the first iteration)',
  },
  {
    id: 'block-moves', title: 'Blocks moved', unit: '1', fields: ['blocks_moved'],
    note: 'blocks_moved: TEBs whose optimizer state changed device since the previous round, all clusters (the decision log has the share of latency they cost)',
  },
  { id: 'objective', title: 'Objective terms', unit: '1', note: 'V·T (objective_latency), V·λ·G(M), Σ Q_k·E_k', fields: ['objective_latency', 'objective_convergence', 'objective_energy'] },
];

/** The charts a run shows: every chart, and those a run's config asks for (perplexity: causal LM),
 * with the fields and note of the run's task where a chart has them. */
export function roundChartsFor(config) {
  return ROUND_CHARTS.filter((c) => !c.when || c.when(config)).map((c) => ({ ...c, ...(c.forModel?.(config.model) || {}) }));
}

export function roundFields(charts = ROUND_CHARTS) {
  return charts.flatMap((c) => c.fields);
}

const hover = (field, axis) => `${field}<br>${X_AXES[axis].hover}<br>%{y}<extra></extra>`;
const label = (def, axis) => `${def.title} over ${axis === 'round' ? 'rounds' : 'modeled elapsed time'}`;

/** A chart of ``def``'s fields against ``axis`` (a key of X_AXES; setXAxis() switches it).
 * ``whyEmpty()``: the text it shows while it has no values (emptyReason of the run's facts). */
export class RoundChart {
  constructor(def, axis = 'round', whyEmpty = () => 'no values yet') {
    this.def = def;
    this.axis = axis;
    this.whyEmpty = whyEmpty;
    this.el = h('div.chart', { id: `chart-${def.id}`, 'data-chart': def.id, role: 'img', 'aria-label': label(def, axis) });
    this.panel = h('section.chart-panel', {}, h('h3', {}, def.title), h('p.chart-note', {}, def.note), this.el);
    this.drawn = false;
  }

  /** First draw, from the /rounds answer's series ({field: {round, value, elapsed_s}}). */
  draw(series) {
    const other = this.axis === 'round' ? 'elapsed_s' : 'round';
    const traces = this.def.fields.map((field, i) => ({
      type: 'scatter',
      mode: 'lines',
      name: field,
      x: series[field] ? series[field][this.axis].slice() : [],
      y: series[field] ? series[field].value.slice() : [],
      customdata: series[field] ? series[field][other].slice() : [],
      line: { color: seriesColor(i), width: 2 },
      hovertemplate: hover(field, this.axis),
    }));
    this.empty = traces.every((t) => !t.x.length);
    this.logStep = this.def.log ? logTickStep(traces.flatMap((t) => t.y)) : null;
    const layout = baseLayout({
      showlegend: true,
      annotations: this.empty ? [emptyNote(this.whyEmpty())] : [],
      margin: { l: 58, r: 12, t: 24, b: 40 },
      xaxis: liveAxis(xAxisLayout(this.axis)),
      yaxis: liveAxis({
        ...axisFormat(this.def.unit),
        ...(this.def.log ? { type: 'log', tickformat: '.3~s', ...logAxisTicks(this.logStep) } : {}),
      }),
    });
    plotly().newPlot(this.el, traces, layout, PLOT_CONFIG);
    this.drawn = true;
  }

  /** Draw against ``axis`` from now on: the drawn points trade x and customdata, the axis is reset. */
  setXAxis(axis) {
    if (axis === this.axis) return;
    this.axis = axis;
    this.el.setAttribute('aria-label', label(this.def, axis));
    if (!this.drawn) return;
    this.def.fields.forEach((field, i) => {
      const trace = this.el.data[i];
      swapX(trace);
      trace.hovertemplate = hover(field, axis);
    });
    Object.assign(this.el.layout.xaxis, xAxisLayout(axis), { autorange: true });
    plotly().redraw(this.el);
  }

  /** Append live rounds ({round: RoundRecord, elapsed_s}: the view's running modeled time at the end
   * of the round; null if it is not known, and then the round is not drawn against time). */
  extend(rounds) {
    if (!this.drawn || !rounds.length) return;
    const xs = [];
    const ys = [];
    const cs = [];
    const indices = [];
    this.def.fields.forEach((field, i) => {
      const x = [];
      const y = [];
      const c = [];
      for (const event of rounds) {
        const value = FROM_RECORD[field](event.round);
        if (value === null || value === undefined || Number.isNaN(value)) continue;
        const [px, pc] = xPair(this.axis, event.round.round, event.elapsed_s ?? null);
        if (px === null) continue;
        x.push(px);
        y.push(value);
        c.push(pc);
      }
      if (x.length) {
        thinTrace(this.el.data[i], x.length);
        xs.push(x);
        ys.push(y);
        cs.push(c);
        indices.push(i);
      }
    });
    if (!indices.length) {
      // still empty: the reason may have changed with these rounds (the first round, a step of M ≥ 2)
      const text = this.empty ? this.whyEmpty() : null;
      if (text !== null && text !== this.el.layout.annotations?.[0]?.text) plotly().relayout(this.el, { annotations: [emptyNote(text)] });
      return;
    }
    plotly().extendTraces(this.el, { x: xs, y: ys, customdata: cs }, indices);
    const relayout = {};
    if (this.empty) {
      this.empty = false;
      relayout.annotations = [];
    }
    if (this.def.log) {
      const step = logTickStep(this.el.data.flatMap((t) => t.y));
      if (step !== this.logStep) {
        this.logStep = step;
        for (const [key, value] of Object.entries(logAxisTicks(step))) relayout[`yaxis.${key}`] = value;
      }
    }
    if (Object.keys(relayout).length) plotly().relayout(this.el, relayout);
  }

  destroy() {
    purge(this.el);
  }
}
