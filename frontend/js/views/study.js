// One study (#/studies/{id}): its progress, live from GET /api/studies/{id}/events (the `study`
// frames), the regime map when the study asks for one (DSSDA against the best budget-holding baseline
// over two axes, a heatmap), the summary table per cell (mean ± 95 % interval over seeds, ratios to a
// chosen baseline cell, the time to a target eval loss when the runs train), the overrides every cell
// shares (a one-value axis such as training.rounds), a figure against one of its figure axes (a band
// against numbers, bars with whiskers against policies or bases), the round series per cell
// (GET /api/studies/{id}/series: one line per cell against the round or the modeled time, a linear or
// log y axis), exports (CSV, Parquet, the self-contained HTML report that reads like this page), a link
// to its runs in the runs list, and cancel / resume for operators.

import { get, post, qs } from '../api.js';
import { h, clear, progressBar, statusBadge, toast, uid } from '../dom.js';
import { subscribe } from '../live.js';
import { purge } from '../plot.js';
import { mayAct } from '../session.js';
import { BASE, drawCiPlot, valueText } from '../study/ci-plot.js';
import { drawRegimeMap } from '../study/regime-map.js';
import { SERIES_X, SERIES_Y, drawSeriesPlot } from '../study/series-plot.js';
import { summaryTable } from '../study/summary-table.js';

const RELOAD_EVERY_MS = 1500; // live: the summaries (and the round series) are read again at most this often
const SERIES_POINTS = 500; // per cell: a chart is ~600 px wide

function control(label, input) {
  const id = uid('study-control');
  input.id = id;
  return h('div.control', {}, h('label', { for: id }, label), input);
}

export function mountStudy(main, { studyId }) {
  let closed = false;
  let detail = null;
  let closeStream = null;
  let reloadTimer = null;
  let lastReload = 0;
  const title = h('h1', {}, `Study ${studyId}`);
  const status = h('span');
  const progress = h('div.row', { id: 'study-progress', 'aria-live': 'polite' });
  const actions = h('div.row');
  const baseline = h('select', {}, h('option', { value: '' }, 'the study\'s own'));
  const target = h('input', { type: 'number', min: '0', step: 'any', placeholder: 'none', inputmode: 'decimal' });
  const targetControl = control('Target eval loss', target); // shown when the study's runs train
  targetControl.hidden = true;
  const overrides = h('p.small', { id: 'study-overrides', hidden: true });
  const metric = h('select');
  const axis = h('select');
  const exportLinks = h('div.row', { id: 'study-exports' });
  const table = h('div', { id: 'study-summary' }, h('p.muted', {}, 'Loading…'));
  const plotNote = h('p.small.muted');
  const plot = h('div.chart', { id: 'study-plot', role: 'img', 'aria-label': 'figure against an axis with 95 % intervals' });
  const regimeNote = h('p.small.muted');
  const regimeCharts = h('div', { id: 'study-regime-map' });
  const regimeSection = h('section.panel', { 'aria-labelledby': 'study-regime-title', hidden: true },
    h('h2', { id: 'study-regime-title' }, 'Regime map'), regimeNote, regimeCharts);
  const seriesField = h('select');
  const seriesX = h('select', {}, SERIES_X.map(([value, text]) => h('option', { value }, text)));
  const seriesY = h('select', {}, SERIES_Y.map(([value, text]) => h('option', { value }, text)));
  const seriesNote = h('p.small.muted');
  const seriesPlot = h('div.chart', { id: 'study-series-plot', role: 'img', 'aria-label': 'round series, one line per cell' });
  let seriesFieldChosen = false; // until the user picks a field: the study's series_field
  let lastSeries = null;
  let seriesRequest = 0;
  const page = h('div', { id: 'study-page' },
    h('p.small', {}, h('a', { href: '#/studies' }, '← Studies')),
    h('div.page-head', {}, title, status),
    h('section.panel', {}, progress, actions,
      h('p.small', {}, h('a', { href: `#/runs?study=${studyId}` }, 'Its runs in the runs list')), overrides),
    regimeSection,
    h('section.panel', { 'aria-labelledby': 'study-table-title' },
      h('h2', { id: 'study-table-title' }, 'Summary per cell'),
      h('p.small.muted', {}, 'Mean over the cell\'s seeds ± the half width of its Student-t 95 % interval; × is the ratio of the mean to the baseline cell\'s.'),
      h('div.filters', {}, control('Baseline cell', baseline), targetControl), table, exportLinks),
    h('section.panel', { 'aria-labelledby': 'study-plot-title' },
      h('h2', { id: 'study-plot-title' }, 'Figure against an axis'),
      h('div.filters', {}, control('Figure', metric), control('Against', axis)), plotNote, plot),
    h('section.panel', { 'aria-labelledby': 'study-series-title' },
      h('h2', { id: 'study-series-title' }, 'Round series per cell'),
      h('p.small.muted', {}, 'One line per cell: the mean over the cell\'s seeds at every round all its runs have; modeled time is Σ latency_s up to the round, averaged the same way.'),
      h('div.filters', {}, control('Field', seriesField), control('X axis', seriesX), control('Y axis', seriesY)),
      seriesNote, seriesPlot));
  main.append(page);

  function renderProgress(p) {
    status.replaceChildren(statusBadge(p.status));
    progress.dataset.runsDone = p.runs_done;
    progress.dataset.runsTotal = p.runs_total;
    progress.dataset.roundsDone = p.rounds_done;
    progress.dataset.status = p.status;
    progress.replaceChildren(
      h('div.control', {}, h('span.small.muted', {}, 'Runs done'), progressBar(p.runs_done, p.runs_total)),
      h('div.control', {}, h('span.small.muted', {}, 'Rounds done'), progressBar(p.rounds_done, p.rounds_total)),
      h('span.small.muted', {}, Object.entries(p.runs_by_status).map(([k, v]) => `${v} ${k}`).join(' · ')));
  }

  function renderActions(p) {
    clear(actions);
    if (!mayAct(detail.owner_name)) return; // the study's owner or an admin, as the API enforces
    const button = (name, url) => {
      const b = h('button.btn.btn-small', { type: 'button', 'data-action': name }, name === 'cancel' ? 'Cancel study' : 'Resume study');
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          const answer = await post(url);
          toast(`${answer.runs_changed} run${answer.runs_changed === 1 ? '' : 's'} ${name === 'cancel' ? 'cancelled or stopping' : 'queued again'}.`);
          load();
          if (name === 'resume') listen();
        } catch (error) {
          toast(`Not done: ${error.message}`);
        } finally {
          b.disabled = false;
        }
      });
      return b;
    };
    if (p.runs_done < p.runs_total) actions.append(button('cancel', `/api/studies/${studyId}/cancel`));
    if ((p.runs_by_status.failed || 0) + (p.runs_by_status.cancelled || 0) > 0) actions.append(button('resume', `/api/studies/${studyId}/resume`));
  }

  /** The summary's query: the baseline cell and the target eval loss (left out when empty, invalid or
   * the runs train nothing). */
  function params() {
    const trains = detail ? detail.trains : true;
    return { baseline_cell: baseline.value, target_eval_loss: trains && target.validity.valid ? target.value : '' };
  }

  function renderExports() {
    const query = qs(params());
    const link = (format, text, extra) => h('a.btn.btn-small', { href: `/api/studies/${studyId}/export?format=${format}${query ? `&${query.slice(1)}` : ''}`, 'data-export': format, ...extra }, text);
    exportLinks.replaceChildren(h('span.small.muted', {}, 'Export:'),
      link('csv', 'CSV', { download: `study-${studyId}.csv` }),
      link('parquet', 'Parquet', { download: `study-${studyId}.parquet` }),
      link('html', 'HTML report', { download: `study-${studyId}.html` }));
  }

  function fillSelect(select, values, preferred) {
    const keep = select.value;
    clear(select).append(...values.map(([value, text]) => h('option', { value }, text)));
    const wanted = values.some(([v]) => v === keep) ? keep : preferred;
    if (wanted !== undefined && values.some(([v]) => v === wanted)) select.value = wanted;
  }

  function render() {
    title.textContent = detail.name;
    renderProgress(detail.progress);
    renderActions(detail.progress);
    const chosen = baseline.value;
    clear(baseline).append(h('option', { value: '' }, 'the study\'s own'),
      ...detail.cells.map((c) => h('option', { value: c.index }, c.label)));
    baseline.value = chosen;
    targetControl.hidden = !detail.trains; // an analytic study trains nothing: no eval loss to reach
    const shared = Object.entries(detail.overrides);
    overrides.hidden = !shared.length;
    overrides.textContent = `Every cell: ${shared.map(([field, value]) => `${field} = ${valueText(value)}`).join('; ')}`;
    table.replaceChildren(summaryTable(detail));
    renderExports();
    const drawable = detail.metrics.filter((m) => detail.cells.some((c) => (c.metrics[m.name]?.mean ?? null) !== null));
    fillSelect(metric, drawable.map((m) => [m.name, m.name]), 'mean_latency_s');
    const axes = detail.figure_axes;
    fillSelect(axis, axes.map((a) => [a.field, a.field === BASE ? 'base (the scenarios)' : a.field]), axes[0]?.field);
    drawPlot();
    drawRegime();
    page.dataset.ready = 'true';
  }

  async function loadSeries() {
    if (!detail) return;
    const field = seriesFieldChosen && seriesField.value ? seriesField.value : detail.series_field;
    const ticket = ++seriesRequest; // a slower earlier answer never overwrites a later one
    try {
      const answer = await get(`/api/studies/${studyId}/series`, { field, x: seriesX.value, max_points: SERIES_POINTS });
      if (closed || ticket !== seriesRequest) return;
      if (seriesField.options.length !== answer.fields.length) {
        seriesField.replaceChildren(...answer.fields.map((f) => h('option', { value: f }, f)));
      }
      seriesField.value = answer.field;
      lastSeries = answer;
      const drawn = drawSeriesPlot(seriesPlot, answer, seriesY.value);
      seriesNote.textContent = drawn ? '' : `No round of ${answer.field} that every run of a cell has yet.`;
    } catch (error) {
      if (!closed && ticket === seriesRequest) seriesNote.textContent = `Cannot read the round series: ${error.message}`;
    }
  }

  function drawRegime() {
    const map = detail.regime_map;
    regimeSection.hidden = !map;
    if (!map) return;
    regimeNote.textContent = map.note;
    drawRegimeMap(regimeCharts, map);
  }

  function drawPlot() {
    const info = detail.metrics.find((m) => m.name === metric.value);
    const against = detail.figure_axes.find((a) => a.field === axis.value);
    if (!info || !against) {
      plotNote.textContent = !against ? 'Every cell of this study has the same values: there is no axis to draw against.'
        : 'No figure has a value yet.';
      plot.hidden = true;
      return;
    }
    plot.hidden = false;
    plotNote.textContent = '';
    drawCiPlot(plot, detail, info, against);
  }

  async function load() {
    lastReload = Date.now();
    try {
      const answer = await get(`/api/studies/${studyId}`, params());
      if (closed) return null;
      detail = answer;
      render();
      loadSeries();
      return answer;
    } catch (error) {
      if (!closed) table.replaceChildren(h('p.bad', {}, `Cannot read study ${studyId}: ${error.message}`));
      return null;
    }
  }

  function scheduleReload() {
    if (reloadTimer || closed) return;
    const wait = Math.max(0, RELOAD_EVERY_MS - (Date.now() - lastReload));
    reloadTimer = setTimeout(() => {
      reloadTimer = null;
      load();
    }, wait);
  }

  function listen() {
    if (closeStream || !detail || detail.progress.runs_done === detail.progress.runs_total) return;
    closeStream = subscribe(`/api/studies/${studyId}/events?after=${encodeURIComponent(detail.last_event_id)}`, {
      study(p) {
        renderProgress(p);
        if (p.runs_done === p.runs_total) {
          closeStream?.();
          closeStream = null;
        }
        scheduleReload();
      },
    }, {
      onError(state) {
        if (state === 2) closeStream = null; // the stream ended: every run is finished
      },
    });
  }

  baseline.addEventListener('change', () => load());
  target.addEventListener('change', () => {
    if (!target.validity.valid) {
      toast('Target eval loss: give a number of 0 or more, or leave it empty.');
      return;
    }
    load();
  });
  seriesField.addEventListener('change', () => {
    seriesFieldChosen = true;
    loadSeries();
  });
  seriesX.addEventListener('change', loadSeries);
  seriesY.addEventListener('change', () => {
    if (lastSeries) drawSeriesPlot(seriesPlot, lastSeries, seriesY.value);
  });
  metric.addEventListener('change', drawPlot);
  axis.addEventListener('change', drawPlot);
  load().then((answer) => {
    if (answer) listen();
  });
  return {
    unmount() {
      closed = true;
      clearTimeout(reloadTimer);
      if (closeStream) closeStream();
      purge(plot);
      purge(seriesPlot);
      for (const chart of regimeCharts.querySelectorAll('.chart')) purge(chart);
    },
  };
}
