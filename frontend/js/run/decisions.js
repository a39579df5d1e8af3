// The DSSDA decision log: per round the objective and its terms, micro-batches M per cluster, the
// blocks moved since the previous round and the share of latency they cost, solver iterations, solve
// time, feasibility and the segments (TEBs per device, ↻ where a device recomputes its activations)
// (GET /api/runs/{id}/decisions). Newest first, paged; live rounds join the first page. A round's
// number is a button: it opens that round (its explanation and its Gantt); the round open is marked.

import { get } from '../api.js';
import { h, clear } from '../dom.js';
import { formatNumber, formatPercent, formatValue } from '../format.js';
import { RECOMPUTE_MARK, RECOMPUTE_NOTE, recomputingDevices } from './recompute.js';

/** Rounds on a page of the log. */
export const DECISION_PAGE = 12;
const PAGE = DECISION_PAGE;
const TERMS = ['objective_latency', 'objective_convergence', 'objective_energy'];
const COLUMNS = 12;

/** "3 (12 %)": TEBs moved and the share of the round latency they cost; "—" for rounds recorded before. */
function moves(item) {
  if (item.blocks_moved === null || item.blocks_moved === undefined) return '—';
  const share = item.moves_latency_share;
  return share === null || share === undefined
    ? String(item.blocks_moved)
    : `${item.blocks_moved} (${formatPercent(share)})`;
}

/** "2 1↻ 1 0 / 4↻ 0 0 0": each cluster's TEBs per device in pipeline order, ↻ on the devices that
 * recompute (``recomputing``: their ids). */
function segmentsCell(item, recomputing) {
  const clusters = item.decision?.clusters || [];
  if (!clusters.length) return h('td', {}, '—');
  const parts = [];
  clusters.forEach((cluster, n) => {
    if (n) parts.push(' / ');
    cluster.devices.forEach((d, k) => {
      if (k) parts.push(' ');
      parts.push(recomputing.has(d.device)
        ? h('span.recompute', { 'data-recompute': d.device, title: `${d.device} ${RECOMPUTE_NOTE}` }, `${d.num_blocks}${RECOMPUTE_MARK}`)
        : String(d.num_blocks));
    });
  });
  return h('td.nowrap', { 'data-segments': '' }, parts);
}

function row(item, onSelect, config) {
  const feasible = item.feasible
    ? h('span.good', {}, 'yes')
    : h('span.bad', { title: item.violations.join('; ') }, `no (${item.violations.length})`);
  const open = h('button.btn-link', { type: 'button', title: `Explain round ${item.round} and show its Gantt`, 'aria-label': `Open round ${item.round}` }, item.round);
  open.addEventListener('click', () => onSelect(item.round, item));
  return h('tr', { 'data-round': item.round },
    h('td.num', {}, open),
    h('td', {}, item.policy),
    h('td.num', {}, formatNumber(item.objective, 4)),
    TERMS.map((t) => h('td.num', {}, formatNumber(item[t], 4))),
    h('td', {}, item.num_microbatches.join(' / ')),
    h('td.num', { title: 'TEBs whose optimizer state changed device (share of the round latency)' }, moves(item)),
    h('td.num', {}, item.solver_iterations),
    h('td.num', {}, formatValue(item.solve_time_s, 's')),
    h('td', {}, feasible),
    segmentsCell(item, recomputingDevices(config, item.decision)));
}

export class DecisionLog {
  /** ``onSelect(round, item)``: the user opened a round (its number's button). ``config``: the run's
   * (who recomputes). */
  constructor(runId, config, { onSelect = () => {} } = {}) {
    this.runId = runId;
    this.config = config;
    this.onSelect = onSelect;
    this.marked = null;
    this.total = 0;
    this.offsetFromNewest = 0;
    this.tbody = h('tbody');
    this.pager = h('div.row.small');
    this.panel = h('section.panel', { id: 'decisions' },
      h('h3', {}, 'Decision log'),
      h('p.chart-note', {}, `Objective V·(T + λ·G) + Σ Q·E and its terms per round; M per cluster; blocks moved since the previous round (their optimizer state changed device) and the share of latency they cost; solver iterations and wall time of the decision; the segments: TEBs per device in pipeline order, clusters separated by /, ${RECOMPUTE_MARK} where a device ${RECOMPUTE_NOTE}.`),
      h('div.table-wrap', {}, h('table.decision-log', { 'aria-label': 'Decision log' },
        h('thead', {}, h('tr', {}, h('th.num', {}, 'Round'), h('th', {}, 'Policy'), h('th.num', {}, 'Objective'),
          h('th.num', {}, 'V·T'), h('th.num', {}, 'V·λ·G'), h('th.num', {}, 'Σ Q·E'), h('th', {}, 'M per cluster'),
          h('th.num', {}, 'Blocks moved'), h('th.num', {}, 'Iterations'), h('th.num', {}, 'Solve time'), h('th', {}, 'Feasible'),
          h('th', {}, 'Segments'))),
        this.tbody)),
      this.pager);
  }

  /** Show the page ``offsetFromNewest`` rounds back from round ``lastRound`` (inclusive).
   * ``items``: decision items (oldest first) covering that page's rounds, if the caller has them. */
  async load(lastRound, items = null) {
    this.lastRound = lastRound;
    this.total = lastRound + 1;
    const to = lastRound - this.offsetFromNewest;
    const from = Math.max(0, to - PAGE + 1);
    if (to < 0) {
      this.render([]);
      return;
    }
    const page = items || (await get(`/api/runs/${this.runId}/decisions`, { from, to, limit: PAGE })).items;
    this.render(page.filter((item) => item.round >= from && item.round <= to).reverse());
  }

  render(items) {
    clear(this.tbody);
    if (!items.length) this.tbody.append(h('tr', {}, h('td.empty', { colspan: COLUMNS }, 'No rounds yet.')));
    for (const item of items) this.tbody.append(row(item, this.onSelect, this.config));
    this.mark(this.marked);
    this.renderPager();
  }

  /** Mark the row of the round open in the explanation and the Gantt (null: none, the view follows the run). */
  mark(round) {
    this.marked = round;
    for (const tr of this.tbody.querySelectorAll('tr[data-round]')) {
      const selected = round !== null && tr.dataset.round === String(round);
      tr.classList.toggle('selected', selected);
      if (selected) tr.setAttribute('aria-current', 'true');
      else tr.removeAttribute('aria-current');
    }
  }

  renderPager() {
    clear(this.pager);
    const newer = h('button.btn.btn-small', { type: 'button', disabled: this.offsetFromNewest === 0 }, '← Newer');
    const older = h('button.btn.btn-small', { type: 'button', disabled: this.offsetFromNewest + PAGE >= this.total }, 'Older →');
    newer.addEventListener('click', () => { this.offsetFromNewest = Math.max(0, this.offsetFromNewest - PAGE); this.load(this.lastRound); });
    older.addEventListener('click', () => { this.offsetFromNewest += PAGE; this.load(this.lastRound); });
    this.pager.append(newer, h('span.muted', {}, `${this.total} rounds`), older);
  }

  /** Live rounds: shown at once on the newest page. */
  extend(rounds) {
    if (!rounds.length) return;
    this.lastRound = rounds[rounds.length - 1].round.round;
    this.total = this.lastRound + 1;
    if (this.offsetFromNewest !== 0) {
      this.renderPager();
      return;
    }
    const empty = this.tbody.querySelector('td.empty');
    if (empty) empty.parentElement.remove();
    for (const event of rounds) {
      const r = event.round;
      this.tbody.prepend(row({ ...r, num_microbatches: r.num_microbatches || [], violations: r.violations || [] }, this.onSelect, this.config));
    }
    while (this.tbody.children.length > PAGE) this.tbody.lastElementChild.remove();
    this.renderPager();
  }
}
