// Why a round's decision is what it is: the round record's ``explanation`` (served with the decision
// log, GET /api/runs/{id}/decisions, and carried by every live round). The cost model evaluated, on
// the same round state, the best placement over two devices or more per cluster (when the scheduler
// concentrated a cluster's TEBs on one device), the chosen placement with the next smaller and larger
// M, and the uniform split. The panel shows the sentence that reads them and a table: each
// alternative's objective against the chosen decision's (in %), the term of the objective that
// weighs most in that difference, the devices it would not fit on, and why an alternative could not
// be evaluated.
//
// The round shown is the newest one until the user picks a round (a row of the decision log, the
// Gantt's round box, a point of a chart); "Newest round" goes back to following the run.
// Everything shown is text (DOM text nodes): no string of a record is parsed as markup.

import { get } from '../api.js';
import { h, clear } from '../dom.js';
import { formatNumber, formatPercent, formatValue } from '../format.js';

/** The objective's terms a difference is split into (delta.compute + links + energy + convergence = ΔJ). */
export const TERMS = {
  compute: 'compute time',
  links: 'link time',
  energy: 'queue-weighted energy',
  convergence: 'convergence term',
};
const KEPT_ROUNDS = 500; // rounds kept (loaded pages and live rounds) to explain without asking the API
const SAME = 1e-6; // a relative difference below this: the alternative costs the same

/** ΔJ of a counterfactual relative to the chosen decision's objective |J| (null when J is 0 or unknown). */
export function relativeChange(entry, objective) {
  const delta = entry.delta?.objective;
  if (typeof delta !== 'number' || typeof objective !== 'number' || objective === 0) return null;
  return delta / Math.abs(objective);
}

/**
 * The term that weighs most in a counterfactual's difference: the largest increase when it costs
 * more, the largest saving when it costs less (as the sentence reads it); null when it costs the same
 * or was not evaluated.
 */
export function weighsMost(entry, objective) {
  const change = relativeChange(entry, objective);
  if (change === null || Math.abs(change) < SAME) return null;
  const sign = change > 0 ? 1 : -1;
  let best = null;
  for (const term of Object.keys(TERMS)) {
    const value = entry.delta[term];
    if (typeof value !== 'number') continue;
    if (best === null || sign * value > sign * entry.delta[best]) best = term;
  }
  return best === null ? null : { term: best, value: entry.delta[best] };
}

const signed = (value) => `${value > 0 ? '+' : ''}${formatNumber(value, 3)}`;

function changeCell(entry, objective) {
  if (!entry.decision) return h('td.num', {}, '—');
  const change = relativeChange(entry, objective);
  if (change === null) return h('td.num', {}, '—');
  const title = `ΔJ = ${signed(entry.delta.objective)} (J = ${formatNumber(entry.objective, 4)} against `
    + `${formatNumber(objective, 4)}); round latency ${signed(entry.delta.latency_s)} s`;
  if (Math.abs(change) < SAME) return h('td.num', { title }, 'the same');
  const text = `${change > 0 ? '+' : '−'}${formatPercent(Math.abs(change))}`;
  return h('td.num', { title }, text);
}

function termCell(entry, objective) {
  const worst = entry.decision ? weighsMost(entry, objective) : null;
  if (!worst) return h('td', {}, '—');
  const every = Object.keys(TERMS).map((t) => `${t} ${signed(entry.delta[t] ?? NaN)}`).join(' · ');
  return h('td', { title: `ΔJ by term: ${every}`, 'data-term': worst.term }, `${TERMS[worst.term]} ${signed(worst.value)}`);
}

function memoryCell(entry) {
  if (!entry.decision) return h('td', {}, '—');
  const refusals = entry.memory || [];
  if (!refusals.length) return h('td.muted', {}, 'fits');
  return h('td.bad', {}, refusals.join('; '));
}

function noteCell(entry) {
  const notes = [];
  if (entry.note) notes.push(entry.note);
  // what else makes it infeasible (memory has its own column)
  if (entry.decision && entry.feasible === false && !(entry.memory || []).length) {
    notes.push(`infeasible: ${(entry.violations || []).join('; ')}`);
  }
  return h('td', {}, notes.join(' · ') || '—');
}

function counterfactualRow(entry, objective) {
  return h('tr', { 'data-counterfactual': entry.name },
    h('td', { title: entry.name }, entry.label || entry.name),
    changeCell(entry, objective),
    termCell(entry, objective),
    memoryCell(entry),
    noteCell(entry));
}

/** What a decision item and a live round record have in common: the round, J and the explanation. */
function explained(record) {
  return { round: record.round, objective: record.objective, explanation: record.explanation || {} };
}

export class ExplanationView {
  /** ``onFollow()``: the user went back to the newest round (the view shows it). */
  constructor(runId, { onFollow = () => {} } = {}) {
    this.runId = runId;
    this.onFollow = onFollow;
    this.known = new Map(); // round -> explained(record)
    this.newest = -1;
    this.following = true;
    this.shown = null;
    this.requests = 0;
    this.heading = h('span.muted', {}, '');
    this.followButton = h('button.btn.btn-small', { type: 'button', hidden: true }, 'Newest round');
    this.followButton.addEventListener('click', () => this.follow());
    this.sentence = h('p.explanation-sentence', {}, 'No round yet.');
    this.solve = h('p.chart-note', { hidden: true });
    this.tbody = h('tbody');
    this.table = h('div.table-wrap', { hidden: true }, h('table.counterfactuals', { 'aria-label': 'Counterfactual decisions' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Alternative'), h('th.num', {}, 'Objective vs chosen'),
        h('th', {}, 'Weighs most'), h('th', {}, 'Memory'), h('th', {}, 'Note'))),
      this.tbody));
    this.panel = h('section.panel', { id: 'explanation' },
      h('div.chart-head', {}, h('h3', {}, 'Why this decision ', this.heading), this.followButton),
      h('p.chart-note', {}, 'Alternatives evaluated by the same cost model on the same round state. '
        + 'Objective vs chosen: how much more (+) or less (−) the alternative\'s objective is; weighs '
        + 'most: the term of the objective (compute time, link time, queue-weighted energy, convergence) '
        + 'that makes most of that difference. Pick a round in the decision log or the Gantt to explain it.'),
      this.sentence, this.table, this.solve);
  }

  /** Keep rounds (decision items or live round records) to explain them without asking the API. */
  remember(records) {
    for (const record of records) {
      if (!Number.isInteger(record.round)) continue;
      this.known.set(record.round, explained(record));
      this.newest = Math.max(this.newest, record.round);
    }
    if (this.known.size > KEPT_ROUNDS) {
      const rounds = [...this.known.keys()].sort((a, b) => a - b);
      for (const round of rounds.slice(0, this.known.size - KEPT_ROUNDS)) {
        if (round !== this.shown) this.known.delete(round);
      }
    }
  }

  /** The history's decision items (oldest first): the newest is shown unless the user chose a round. */
  load(items) {
    this.remember(items);
    if (this.following && this.known.has(this.newest)) this.render(this.known.get(this.newest));
  }

  /** Live rounds ({round: RoundRecord}): the newest is shown unless the user chose a round. */
  extend(batch) {
    this.load(batch.map((event) => event.round));
  }

  /** Explain round ``round``, chosen by the user: shown until they choose another or follow again. */
  async select(round) {
    this.following = false;
    this.followButton.hidden = false;
    const known = this.known.get(round);
    if (known) {
      this.render(known);
      return;
    }
    this.requests += 1;
    const request = this.requests;
    this.sentence.textContent = `Loading round ${round}…`;
    try {
      const page = await get(`/api/runs/${this.runId}/decisions`, { from: round, to: round, limit: 1 });
      if (request !== this.requests) return;
      const item = page.items.find((i) => i.round === round);
      if (!item) {
        this.renderMissing(round, `There is no stored round ${round}.`);
        return;
      }
      this.remember([item]);
      this.render(this.known.get(round));
    } catch (error) {
      if (request === this.requests) this.renderMissing(round, error.message);
    }
  }

  /** Follow the run again: show the newest round, and every newer one as it arrives. */
  follow() {
    this.following = true;
    this.followButton.hidden = true;
    this.requests += 1;
    if (this.known.has(this.newest)) this.render(this.known.get(this.newest));
    this.onFollow(this.newest);
  }

  renderMissing(round, message) {
    this.shown = null;
    this.panel.dataset.round = '';
    this.heading.textContent = `· round ${round}`;
    this.sentence.textContent = message;
    this.table.hidden = true;
    this.solve.hidden = true;
  }

  render({ round, objective, explanation }) {
    this.requests += 1; // an answer still on its way must not replace this
    this.shown = round;
    this.panel.dataset.round = String(round);
    this.heading.textContent = `· round ${round}${this.following ? ' (the newest)' : ''}`;
    const entries = Array.isArray(explanation.counterfactuals) ? explanation.counterfactuals : [];
    if (!explanation.sentence) {
      this.sentence.textContent = `Round ${round} was recorded before decisions were explained.`;
      this.table.hidden = true;
      this.solve.hidden = true;
      return;
    }
    this.sentence.textContent = explanation.sentence;
    clear(this.tbody);
    for (const entry of entries) this.tbody.append(counterfactualRow(entry, objective));
    this.table.hidden = !entries.length;
    const solveS = explanation.spread_solve_s;
    this.solve.hidden = !(solveS > 0);
    this.solve.textContent = solveS > 0
      ? `The best placement over two or more devices is a constrained solve of its own: ${formatValue(solveS, 's')}.`
      : '';
  }
}
