// A study's summary table: one row per cell, per figure the mean over the cell's seeds ± the half
// width of its Student-t 95 % interval, and the ratio of the mean to the baseline cell's.

import { h } from '../dom.js';
import { formatNumber, formatValue } from '../format.js';

/** "12.3 ms ± 0.4 ms" (no interval below two runs). */
export function meanWithInterval(summary, unit) {
  if (!summary || summary.mean === null) return '—';
  const mean = formatValue(summary.mean, unit);
  if (summary.ci95_low === null || summary.ci95_high === null) return mean;
  return `${mean} ± ${formatValue((summary.ci95_high - summary.ci95_low) / 2, unit)}`;
}

function runsCell(cell) {
  const done = cell.runs.filter((r) => r.status === 'succeeded').length;
  const failed = cell.runs.filter((r) => r.status === 'failed').length;
  return h('td.nowrap', { 'data-col': 'runs', title: cell.runs.map((r) => `run ${r.id} (seed ${r.seed}): ${r.status}`).join('\n') },
    `${done}/${cell.runs.length}`, failed ? h('span.bad', {}, ` · ${failed} failed`) : null);
}

export function summaryTable(detail) {
  const metrics = detail.metrics.filter((m) => detail.cells.some((c) => c.metrics[m.name]?.mean !== null && c.metrics[m.name] !== undefined));
  const head = h('tr', {}, h('th', {}, 'Cell'), h('th', {}, 'Runs ok'),
    metrics.map((m) => h('th.num', { title: m.description, scope: 'col' }, m.name, m.unit !== '1' ? h('span.muted', {}, ` (${m.unit})`) : null)));
  const rows = detail.cells.map((cell) => h('tr', { 'data-cell': cell.index, class: cell.baseline_cell === cell.index ? 'baseline-row' : null },
    h('th', { scope: 'row' }, cell.label, cell.baseline_cell === cell.index ? h('span.pill', {}, 'baseline') : null),
    runsCell(cell),
    metrics.map((m) => {
      const summary = cell.metrics[m.name];
      const ratio = cell.ratios[m.name];
      return h('td.num.nowrap', { 'data-metric': m.name, 'data-mean': summary?.mean ?? '' },
        meanWithInterval(summary, m.unit),
        ratio !== null && ratio !== undefined && cell.baseline_cell !== null && cell.baseline_cell !== cell.index
          ? h('div.small.muted', { 'data-ratio': ratio }, `×${formatNumber(ratio)}`) : null);
    })));
  return h('div.table-wrap', {}, h('table', { 'aria-label': 'Summary per cell', id: 'study-table' },
    h('thead', {}, head), h('tbody', {}, rows)));
}
