// Compare runs: pick runs and a baseline, overlay their curves, and a table of each figure with its
// ratio to the baseline (GET /api/compare), exportable as CSV (built in the browser from that answer).
// One curve shows an eval metric the user chooses among the catalogue's (GET /api/config/metrics):
// at first the one the compared runs have, in EVAL_PREFERENCE's order (perplexity for causal LMs).
// With a target eval loss (?target= in the address), the table has each run's modeled time to it.
// The curves are drawn against the round or the modeled elapsed time ("X axis", as on the run view).
// The picker finds runs by name and hides or picks study runs ("Studies"); both are kept in the address
// (&search=, &study=) so pressing "Compare" keeps them. The baseline is chosen by run name.

import { get, qs } from '../api.js';
import { EVAL_PREFERENCE } from '../run-info.js';
import { h, clear, statusBadge, uid } from '../dom.js';
import { studyFilter, studyParams } from '../study/study-filter.js';
import { formatNumber, formatPercent, formatRatio, formatValue } from '../format.js';
import {
  PLOT_CONFIG, X_AXES, baseLayout, plotText, plotly, purge, savedXAxis, seriesColor, xAxisControl, xAxisLayout,
} from '../plot.js';

const FIGURES = [
  { key: 'mean_latency_s', label: 'Mean latency', format: (v) => formatValue(v, 's') },
  { key: 'efficiency', label: 'Efficiency', format: (v) => formatPercent(v) },
  { key: 'peak_memory_bytes', label: 'Peak memory', format: (v) => formatValue(v, 'bytes') },
  { key: 'mean_energy_budget_ratio', label: 'Energy / budget', format: (v) => formatPercent(v) },
];
// shown when the comparison has a target eval loss: Σ latency_s up to the first round that reached it
const TIME_TO_TARGET = {
  key: 'time_to_target_s', label: 'Time to target', format: (v, row) => (v === null || v === undefined ? 'not reached'
    : `${formatValue(v, 's')} (${row.rounds_to_target} rounds)`),
};
const CURVES = [
  { field: 'eval_loss', title: 'Eval loss', unit: '1' },
  { field: null, title: 'Eval metric', unit: '1' }, // the chosen eval metric
  { field: 'latency_s', title: 'Round latency (modeled)', unit: 's' },
  { field: 'train_loss', title: 'Train loss', unit: '1' },
];
const LOG_SCALE = new Set(['eval_perplexity']); // thousands down to tens

let evalCatalogue = null;
/** Eval metrics a user may chart (the catalogue's eval_* but eval_loss, which has its own chart). */
async function evalMetrics() {
  if (!evalCatalogue) {
    evalCatalogue = get('/api/config/metrics')
      .then((all) => all.filter((m) => m.scope === 'round' && m.name.startsWith('eval_') && m.name !== 'eval_loss'))
      .catch((error) => { evalCatalogue = null; throw error; });
  }
  return evalCatalogue;
}

export function mountCompare(main, { query }) {
  const chosen = new Set((query.get('ids') || '').split(',').map(Number).filter((n) => Number.isInteger(n) && n > 0));
  let baseline = Number(query.get('baseline')) || null;
  const target = query.get('target') || ''; // as typed: the API checks it (a finite loss ≥ 0)
  let xAxis = savedXAxis();
  let closed = false;
  const charts = [];
  let lastResult = null;

  const searchId = uid('compare-search');
  const baselineId = uid('compare-baseline');
  const search = h('input', { id: searchId, type: 'search', placeholder: 'name contains…', value: query.get('search') || '' });
  let study = query.get('study') || ''; // '', 'none', 'any' or a study id
  const studies = studyFilter(study, (value) => { study = value; loadPicker(); });
  const names = new Map(); // run id → name, from the picker's pages and the comparison
  const baselineSelect = h('select', { id: baselineId });
  const targetId = uid('compare-target');
  const targetInput = h('input', { id: targetId, type: 'number', min: 0, step: 'any', placeholder: 'none', value: target,
    title: 'each run\'s modeled time (Σ round latency) until its eval loss is at most this' });
  const pickList = h('tbody');
  const compareButton = h('button.btn.btn-primary', { type: 'button' }, 'Compare');
  const exportButton = h('button.btn', { type: 'button', disabled: true }, 'Export CSV');
  const results = h('div', { id: 'compare-results' });

  main.append(
    h('div.page-head', {}, h('h1', {}, 'Compare runs')),
    h('section.panel', { 'aria-label': 'Pick runs' },
      h('div.filters', {},
        h('div.control', {}, h('label', { for: searchId }, 'Find runs'), search),
        studies.control,
        h('div.control', {}, h('label', { for: baselineId }, 'Baseline'), baselineSelect),
        h('div.control', {}, h('label', { for: targetId }, 'Target eval loss'), targetInput),
        compareButton, exportButton),
      h('div.table-wrap', { style: 'max-height: 260px; overflow-y: auto' },
        h('table', { 'aria-label': 'Runs to compare' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Pick'), h('th', {}, 'Run'), h('th', {}, 'Status'), h('th', {}, 'Policy'), h('th.num', {}, 'Rounds'))),
          pickList))),
    results,
  );

  function renderBaselineOptions() {
    clear(baselineSelect);
    const ids = [...chosen].sort((a, b) => a - b);
    if (!ids.length) baselineSelect.append(h('option', { value: '' }, 'pick runs first'));
    for (const id of ids) {
      baselineSelect.append(h('option', { value: id, selected: id === baseline }, names.has(id) ? `${names.get(id)} (#${id})` : `#${id}`));
    }
    if (!ids.includes(baseline)) baseline = ids[0] || null;
    baselineSelect.value = baseline ? String(baseline) : '';
    compareButton.disabled = ids.length < 1;
  }

  let pickerRequest = 0;
  async function loadPicker() {
    const ticket = ++pickerRequest; // a slower earlier answer (another search or filter) never overwrites a later one
    let page;
    try {
      page = await get('/api/runs', { search: search.value.trim() || undefined, ...studyParams(study), limit: 100 });
    } catch (error) {
      if (ticket === pickerRequest) clear(pickList).append(h('tr', {}, h('td.empty', { colspan: 5 }, error.message)));
      return;
    }
    if (closed || ticket !== pickerRequest) return;
    clear(pickList);
    for (const run of page.items) names.set(run.id, run.name);
    renderBaselineOptions();
    for (const run of page.items) {
      const box = h('input', { type: 'checkbox', checked: chosen.has(run.id), 'aria-label': `Compare run ${run.id} ${run.name}`, 'data-run-id': run.id });
      box.addEventListener('change', () => {
        if (box.checked) chosen.add(run.id);
        else chosen.delete(run.id);
        renderBaselineOptions();
      });
      pickList.append(h('tr', {}, h('td', {}, box), h('td', {}, h('a', { href: `#/runs/${run.id}` }, run.name), h('span.small.muted', {}, ` #${run.id}`)),
        h('td', {}, statusBadge(run.status)), h('td', {}, run.policy), h('td.num', {}, `${run.rounds_done}/${run.total_rounds}`)));
    }
  }

  function ratioCell(row, key, format) {
    const ratio = row.ratios[key];
    return h('td.num', { 'data-figure': key, 'data-value': row[key] ?? '' }, format(row[key], row),
      h('div.small.muted', {}, row.run_id === lastResult.baseline_run_id ? 'baseline' : formatRatio(ratio)));
  }

  /** The figures of the table: the summary's, and the time to target when one was asked. */
  function figuresOf(result) {
    return result.target_eval_loss === null || result.target_eval_loss === undefined ? FIGURES : [...FIGURES, TIME_TO_TARGET];
  }

  function renderTable(result) {
    const evalKeys = [...new Set(result.runs.flatMap((r) => Object.keys(r.final_eval)))];
    const figures = figuresOf(result);
    const targetNote = figures === FIGURES ? ''
      : ` Time to target: modeled time (Σ round latency) until the eval loss is at most ${formatNumber(result.target_eval_loss, 4)}.`;
    return h('section.panel', {},
      h('h2', {}, 'Figures and ratios to the baseline'),
      h('p.chart-note', {}, `Each figure, and below it the ratio to run #${result.baseline_run_id}. Final eval figures are from the last evaluated round.${targetNote}`),
      h('div.table-wrap', {}, h('table', { id: 'compare-table', 'aria-label': 'Comparison' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Run'), h('th', {}, 'Policy'), h('th.num', {}, 'Rounds'),
          figures.map((f) => h('th.num', {}, f.label)), evalKeys.map((k) => h('th.num', {}, `final ${k}`)))),
        h('tbody', {}, result.runs.map((row) => h('tr', { 'data-run-id': row.run_id, class: row.run_id === result.baseline_run_id ? 'baseline' : '' },
          h('td', {}, h('a', { href: `#/runs/${row.run_id}` }, row.name), h('span.small.muted', {}, ` #${row.run_id}`)),
          h('td', {}, row.policy), h('td.num', {}, row.rounds_done),
          figures.map((f) => ratioCell(row, f.key, f.format)),
          evalKeys.map((k) => h('td.num', {}, formatNumber(row.final_eval[k], 4),
            h('div.small.muted', {}, row.run_id === result.baseline_run_id ? 'baseline' : formatRatio(row.ratios[`final_${k}`]))))))))));
  }

  /** Overlay ``field`` of every run against the chosen x axis (a run's x and customdata: X_AXES). */
  function drawCurve(el, result, series, field) {
    purge(el);
    const other = xAxis === 'round' ? 'elapsed_s' : 'round';
    const traces = result.runs.map((row, i) => ({
      type: 'scatter', mode: 'lines', name: plotText(`#${row.run_id} ${row.name}`),
      x: series[i].series[field]?.[xAxis] || [], y: series[i].series[field]?.value || [],
      customdata: series[i].series[field]?.[other] || [],
      line: { color: seriesColor(i), width: row.run_id === result.baseline_run_id ? 3 : 2 },
      hovertemplate: `#${row.run_id} ${field}<br>${X_AXES[xAxis].hover}<br>%{y}<extra></extra>`,
    }));
    const xaxis = { gridcolor: '#eef1f5', zeroline: false, automargin: true, ...xAxisLayout(xAxis) };
    const yaxis = { gridcolor: '#eef1f5', zeroline: false, automargin: true, ...(LOG_SCALE.has(field) ? { type: 'log', tickformat: '.3~s' } : {}) };
    plotly().newPlot(el, traces, baseLayout({ showlegend: true, margin: { l: 58, r: 12, t: 30, b: 40 }, xaxis, yaxis }), PLOT_CONFIG);
    el.dataset.field = field;
    el.dataset.xAxis = xAxis;
    if (!charts.includes(el)) charts.push(el);
  }

  /** The eval metric chart's control: the catalogue's eval metrics, the runs' own first. */
  function evalChooser(metrics, result, onChange) {
    const have = new Set(result.runs.flatMap((r) => Object.keys(r.final_eval)));
    const ranked = EVAL_PREFERENCE.filter((n) => have.has(n) && metrics.some((m) => m.name === n));
    const chosen = ranked[0] || metrics[0]?.name || 'eval_accuracy';
    const id = uid('compare-eval');
    const select = h('select', { id }, metrics.map((m) => h('option', { value: m.name, title: m.description }, m.name)));
    select.value = chosen;
    select.addEventListener('change', () => onChange(select.value));
    return { control: h('div.control.control-inline', {}, h('label', { for: id }, 'Eval metric'), select), chosen };
  }

  async function renderCurves(result) {
    const grid = h('div.grid');
    let redraw = () => {}; // once the series are at hand: every curve again, against the new axis
    const control = xAxisControl(xAxis, (axis) => { xAxis = axis; redraw(); });
    results.append(h('div.section-title', {}, h('h2', {}, 'Curves'), control), grid);
    const metrics = await evalMetrics();
    const fields = [...new Set([...CURVES.map((c) => c.field).filter(Boolean), ...metrics.map((m) => m.name)])];
    const series = await Promise.all(result.runs.map((row) => get(`/api/runs/${row.run_id}/rounds`, {
      fields, max_points: 500,
    })));
    if (closed) return;
    redraw = () => charts.forEach((el) => drawCurve(el, result, series, el.dataset.field));
    for (const curve of CURVES) {
      if (curve.field) {
        const el = h('div.chart', { 'data-chart': `compare-${curve.field}` });
        grid.append(h('section.chart-panel', {}, h('h3', {}, curve.title), el));
        drawCurve(el, result, series, curve.field);
        continue;
      }
      const el = h('div.chart', { 'data-chart': 'compare-eval-metric' });
      const { control, chosen } = evalChooser(metrics, result, (field) => drawCurve(el, result, series, field));
      grid.append(h('section.chart-panel', {}, h('div.chart-head', {}, h('h3', {}, curve.title), control), el));
      drawCurve(el, result, series, chosen);
    }
  }

  async function runCompare() {
    charts.splice(0).forEach(purge);
    clear(results);
    const ids = [...chosen].sort((a, b) => a - b);
    if (!ids.length) return;
    results.append(h('p.muted', {}, 'Comparing…'));
    try {
      lastResult = await get('/api/compare', { run_ids: ids.join(','), baseline: baseline || undefined, target_eval_loss: target || undefined });
    } catch (error) {
      // a refused parameter (a target that is not a loss) with the API's reason
      const reasons = error.details?.map((d) => d.message).join('; ');
      clear(results).append(h('div.panel', {}, h('p.bad', { role: 'alert' }, reasons ? `${error.message} (${reasons})` : error.message)));
      return;
    }
    if (closed) return;
    for (const row of lastResult.runs) names.set(row.run_id, row.name);
    renderBaselineOptions();
    clear(results).append(renderTable(lastResult));
    exportButton.disabled = false;
    results.dataset.ready = 'true';
    try {
      await renderCurves(lastResult);
    } catch (error) {
      results.append(h('p.bad', {}, `The curves failed to load: ${error.message}`));
    }
  }

  compareButton.addEventListener('click', () => {
    const ids = [...chosen].sort((a, b) => a - b).join(',');
    const typed = targetInput.value.trim();
    const kept = qs({ search: search.value.trim(), study, target: typed }).slice(1); // the picker's search and filter stay
    const address = `#/compare?ids=${ids}${baseline ? `&baseline=${baseline}` : ''}${kept ? `&${kept}` : ''}`;
    if (location.hash === address) runCompare();
    else location.hash = address;
  });
  targetInput.addEventListener('keydown', (event) => { if (event.key === 'Enter') compareButton.click(); });
  baselineSelect.addEventListener('change', () => { baseline = Number(baselineSelect.value) || null; });
  exportButton.addEventListener('click', () => downloadCsv(lastResult));
  let searchTimer = null;
  search.addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(loadPicker, 250); });

  renderBaselineOptions();
  loadPicker();
  if (chosen.size) runCompare();
  return {
    unmount() {
      closed = true;
      clearTimeout(searchTimer);
      charts.splice(0).forEach(purge);
    },
  };
}

const FORMULA_START = /^[=+\-@\t\r]/;

/** A CSV field; text a spreadsheet would read as a formula (a run named =HYPERLINK(...)) gets a
 * leading apostrophe, which spreadsheets show as text, as the API's own CSV exports do. */
export function csvCell(value) {
  if (value === null || value === undefined) return '';
  const text = typeof value === 'string' && FORMULA_START.test(value) ? `'${value}` : String(value);
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The comparison as CSV: one row per run, each figure and its ratio to the baseline. */
export function compareCsv(result) {
  const evalKeys = [...new Set(result.runs.flatMap((r) => Object.keys(r.final_eval)))];
  const header = ['run_id', 'name', 'policy', 'rounds_done', 'baseline_run_id'];
  for (const f of FIGURES) header.push(f.key, `${f.key}_ratio`);
  for (const k of evalKeys) header.push(`final_${k}`, `final_${k}_ratio`);
  header.push('target_eval_loss', 'time_to_target_s', 'time_to_target_s_ratio', 'rounds_to_target');
  const lines = [header.join(',')];
  for (const row of result.runs) {
    const cells = [row.run_id, row.name, row.policy, row.rounds_done, result.baseline_run_id];
    for (const f of FIGURES) cells.push(row[f.key], row.ratios[f.key]);
    for (const k of evalKeys) cells.push(row.final_eval[k], row.ratios[`final_${k}`]);
    cells.push(result.target_eval_loss, row.time_to_target_s, row.ratios.time_to_target_s, row.rounds_to_target);
    lines.push(cells.map(csvCell).join(','));
  }
  return `${lines.join('\n')}\n`;
}

function downloadCsv(result) {
  if (!result) return;
  const blob = new Blob([compareCsv(result)], { type: 'text/csv' });
  const url = URL.createObjectURL(blob);
  const link = h('a', { href: url, download: `compare-${result.runs.map((r) => r.run_id).join('-')}.csv` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
