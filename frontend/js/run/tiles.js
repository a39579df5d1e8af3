// Summary tiles: rounds done, mean round latency, computation efficiency (1 − mean bubble fraction),
// energy against budget (mean E/Ē), peak modeled memory, and the latest eval figure (perplexity for
// a causal LM, else accuracy, loss or error rate). Exact figures come from GET /api/compare (over the
// rounds stored then); live rounds update them incrementally until the run ends.

import { h } from '../dom.js';
import { formatNumber, formatPercent, formatValue } from '../format.js';
import { EVAL_PREFERENCE } from '../run-info.js';

const EVAL_LABELS = {
  eval_perplexity: 'Eval perplexity', eval_accuracy: 'Eval accuracy', eval_loss: 'Eval loss', eval_error_rate: 'Eval error rate',
};

/** A round record's eval figure by its series name. */
function evalOf(record, name) {
  const value = name === 'eval_loss' ? record.eval_loss : record.eval_metrics?.[name];
  return value === null || value === undefined || Number.isNaN(value) ? null : value;
}

export class Tiles {
  constructor(config) {
    this.values = {};
    this.el = h('div.tiles', { id: 'tiles' });
    // the first eval figure a run has, in EVAL_PREFERENCE's order: perplexity for a causal LM
    const evalLabel = config?.model?.kind === 'causal_lm' ? EVAL_LABELS.eval_perplexity : 'Latest eval';
    for (const [key, label] of [
      ['rounds', 'Rounds done'], ['latency', 'Mean round latency'], ['efficiency', 'Computation efficiency'],
      ['energy', 'Energy vs budget'], ['memory', 'Peak memory (modeled)'], ['eval', evalLabel],
    ]) {
      const value = h('div.tile-value', { 'data-tile': key }, '—');
      const note = h('div.tile-note', {});
      const labelEl = h('div.tile-label', {}, label);
      this.values[key] = { value, note, label: labelEl };
      this.el.append(h('div.tile', {}, labelEl, value, note));
    }
    this.acc = { n: 0, latency: 0, bubbles: 0, bubbleRounds: 0, energyRatio: 0, energyCount: 0, peak: null };
    this.latestEval = null; // {name, value, round}
  }

  /** The first eval figure ``values(name)`` has, in EVAL_PREFERENCE's order. */
  pickEval(values, round) {
    for (const name of EVAL_PREFERENCE) {
      const value = values(name);
      if (value !== null && value !== undefined) return { name, value, round };
    }
    return null;
  }

  set(key, value, note = '') {
    this.values[key].value.textContent = value;
    this.values[key].note.textContent = note;
  }

  /** Start from a compare row (exact over its rounds_done rounds) and the run's total rounds. */
  reset(row, totalRounds, devicesCount) {
    const n = row ? row.rounds_done : 0;
    this.total = totalRounds;
    this.devicesCount = devicesCount;
    this.covered = n; // rounds 0 … n-1 are in the compare figures
    this.acc = {
      n,
      latency: row && row.mean_latency_s !== null ? row.mean_latency_s * n : 0,
      bubbles: row && row.efficiency !== null ? (1 - row.efficiency) * n : 0,
      bubbleRounds: row && row.efficiency !== null ? n : 0,
      energyRatio: row && row.mean_energy_budget_ratio !== null ? row.mean_energy_budget_ratio * n * devicesCount : 0,
      energyCount: row && row.mean_energy_budget_ratio !== null ? n * devicesCount : 0,
      peak: row ? row.peak_memory_bytes : null,
    };
    const final = row ? row.final_eval || {} : {};
    this.latestEval = this.pickEval((name) => final[name], null);
    this.render();
  }

  extend(rounds) {
    const a = this.acc;
    for (const event of rounds) {
      const r = event.round;
      if (r.round < this.covered) continue;
      this.covered = r.round + 1;
      a.n += 1;
      a.latency += r.latency_s;
      if (r.bubble_fraction && r.bubble_fraction.length) {
        a.bubbles += r.bubble_fraction.reduce((s, v) => s + v, 0) / r.bubble_fraction.length;
        a.bubbleRounds += 1;
      }
      for (const d of event.devices) {
        if (d.energy_budget_j > 0) {
          a.energyRatio += d.energy_j / d.energy_budget_j;
          a.energyCount += 1;
        }
        a.peak = a.peak === null ? d.memory_bytes : Math.max(a.peak, d.memory_bytes);
      }
      this.latestEval = this.pickEval((name) => evalOf(r, name), r.round) || this.latestEval;
    }
    this.render();
  }

  render() {
    const a = this.acc;
    this.set('rounds', `${a.n} / ${this.total}`, a.n >= this.total ? 'all rounds done' : `${this.total - a.n} to go`);
    this.set('latency', a.n ? formatValue(a.latency / a.n, 's') : '—', 'latency_s, modeled');
    this.set('efficiency', a.bubbleRounds ? formatPercent(1 - a.bubbles / a.bubbleRounds) : '—', '1 − mean pipeline bubble');
    this.set('energy', a.energyCount ? formatPercent(a.energyRatio / a.energyCount) : '—', 'mean E_k / Ē_k over devices and rounds');
    this.set('memory', formatValue(a.peak, 'bytes'), 'largest memory_bytes of any device');
    const e = this.latestEval;
    const tile = this.values.eval;
    tile.value.dataset.metric = e ? e.name : '';
    if (e) tile.label.textContent = EVAL_LABELS[e.name] || e.name;
    this.set('eval', e ? (e.name === 'eval_accuracy' || e.name === 'eval_error_rate' ? formatPercent(e.value) : formatNumber(e.value, 4)) : '—',
      e ? `${e.name}, ${e.round === null ? 'last evaluated round' : `round ${e.round}`}` : 'no eval yet');
  }
}
