// Runs list: status, progress (rounds done of all), policy, V, clusters × devices, latest latency and
// eval metric, owner — all from one GET /api/runs per page; filter and search; live from the status
// stream (GET /api/runs/events), with a light refresh of the page while runs are active (the status
// stream carries status changes, not rounds).

import { get } from '../api.js';
import { h, clear, statusBadge, progressBar, uid } from '../dom.js';
import { formatValue, formatNumber, formatTime } from '../format.js';
import { subscribe } from '../live.js';
import { runActions } from '../run-actions.js';
import { can, user } from '../session.js';
import { listedEval } from '../run-info.js';
import { studyFilter, studyParams } from '../study/study-filter.js';

const PAGE = 50;
const POLL_MS = 2500;
const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'];

export function mountRuns(main, { query }) {
  const state = {
    status: query.get('status') || '',
    search: query.get('search') || '',
    mine: query.get('mine') === '1',
    study: query.get('study') || '', // '', 'none', 'any' or a study id (study/study-filter.js)
    offset: 0,
    total: 0,
    items: [],
    selected: new Set(),
  };
  let closed = false;
  let pollTimer = null;
  let reloadTimer = null;

  const statusId = uid('filter-status');
  const searchId = uid('filter-search');
  const mineId = uid('filter-mine');
  const statusSelect = h('select', { id: statusId }, h('option', { value: '' }, 'any status'),
    STATUSES.map((s) => h('option', { value: s, selected: s === state.status }, s)));
  const searchInput = h('input', { id: searchId, type: 'search', placeholder: 'name contains…', value: state.search });
  const mineBox = h('input', { id: mineId, type: 'checkbox', checked: state.mine });
  const studies = studyFilter(state.study, (value) => { state.study = value; state.offset = 0; load(); });
  const compareButton = h('button.btn', { type: 'button', disabled: true }, 'Compare selected');
  const launchLink = can('operator') ? h('a.btn.btn-primary', { href: '#/launch' }, 'Launch a run') : null;
  const tbody = h('tbody');
  const pager = h('div.row.small');
  const live = h('span.small.muted', { 'aria-live': 'polite' }, 'connecting…');

  main.append(
    h('div.page-head', {}, h('h1', {}, 'Runs'), live, h('div.spacer'), compareButton, launchLink),
    h('div.filters', { role: 'search' },
      h('div.control', {}, h('label', { for: statusId }, 'Status'), statusSelect),
      h('div.control', {}, h('label', { for: searchId }, 'Search'), searchInput),
      studies.control,
      h('div.checkbox', {}, mineBox, h('label', { for: mineId }, 'only my runs'))),
    h('div.table-wrap', {},
      h('table', { 'aria-label': 'Runs' },
        h('thead', {}, h('tr', {},
          h('th', {}, h('span', { class: 'sr-only' }, 'select')), h('th', {}, 'Run'), h('th', {}, 'Status'), h('th', {}, 'Progress'),
          h('th', {}, 'Policy'), h('th.num', {}, 'V'), h('th', {}, 'Clusters × devices'),
          h('th.num', {}, 'Latency'), h('th.num', {}, 'Eval'), h('th', {}, 'Owner'), h('th', {}, 'Created'), h('th', {}, 'Actions'))),
        tbody)),
    pager,
  );

  const rows = new Map();

  function cellsFor(run) {
    const select = h('input', { type: 'checkbox', 'aria-label': `Select run ${run.id} to compare`, checked: state.selected.has(run.id) });
    select.addEventListener('change', () => {
      if (select.checked) state.selected.add(run.id);
      else state.selected.delete(run.id);
      compareButton.disabled = state.selected.size < 1;
    });
    return {
      select,
      name: h('td', {}, h('a', { href: `#/runs/${run.id}` }, run.name), h('div.small.muted', {}, `#${run.id}${run.parent_run_id ? ` · fork of #${run.parent_run_id} @${run.fork_round}` : ''}`)),
      status: h('td', {}, statusBadge(run.status)),
      progress: h('td', {}, progressBar(run.rounds_done, run.total_rounds)),
      policy: h('td', {}, run.policy),
      V: h('td.num', {}, formatNumber(run.V)),
      shape: h('td', {}, `${run.num_clusters} × ${run.devices_per_cluster}`),
      latency: h('td.num', {}, '—'),
      evalCell: h('td.num', {}, '—'),
      owner: h('td', {}, run.owner_name ?? '—'),
      created: h('td.small.nowrap', {}, formatTime(run.created_at)),
      actions: h('td', {}),
    };
  }

  function renderRow(run) {
    const cells = cellsFor(run);
    const tr = h('tr', { 'data-run-id': run.id },
      h('td', {}, cells.select), cells.name, cells.status, cells.progress, cells.policy, cells.V, cells.shape,
      cells.latency, cells.evalCell, cells.owner, cells.created, cells.actions);
    const row = { tr, cells, run };
    rows.set(run.id, row);
    updateRow(row, run);
    return tr;
  }

  /** ``run``: a listed run, or the fields a status event changes (the latest figures come with the
   * next listing). */
  function updateRow(row, run) {
    row.run = { ...row.run, ...run };
    const { cells } = row;
    clear(cells.status).append(statusBadge(row.run.status));
    clear(cells.progress).append(progressBar(row.run.rounds_done, row.run.total_rounds));
    cells.latency.textContent = formatValue(row.run.latest_latency_s, 's');
    // rounds as the progress counts them (12/12), never a round's 0-based index beside that count
    cells.latency.title = row.run.rounds_done ? `latency_s of the last of ${row.run.rounds_done} rounds done` : '';
    const figure = listedEval(row.run);
    clear(cells.evalCell).append(figure ? formatNumber(figure.value) : '—');
    cells.evalCell.title = figure ? `${figure.name} after ${figure.round + 1} of ${row.run.rounds_done} rounds` : '';
    if (figure) cells.evalCell.append(h('div.small.muted', {}, figure.name.replace('eval_', '')));
    clear(cells.actions).append(runActions(row.run, { onChanged: scheduleReload }));
  }

  function renderPager() {
    clear(pager);
    const from = state.total ? state.offset + 1 : 0;
    const to = Math.min(state.offset + PAGE, state.total);
    const prev = h('button.btn.btn-small', { type: 'button', disabled: state.offset === 0 }, '← Newer');
    const next = h('button.btn.btn-small', { type: 'button', disabled: to >= state.total }, 'Older →');
    prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - PAGE); load(); });
    next.addEventListener('click', () => { state.offset += PAGE; load(); });
    pager.append(prev, h('span.muted', {}, `${from}–${to} of ${state.total}`), next);
  }

  function params() {
    return {
      status: state.status || undefined,
      search: state.search.trim() || undefined,
      owner: state.mine ? user().username : undefined,
      ...studyParams(state.study),
      limit: PAGE,
      offset: state.offset,
    };
  }

  async function load() {
    let page;
    try {
      page = await get('/api/runs', params());
    } catch (error) {
      clear(tbody).append(h('tr', {}, h('td.empty', { colspan: 13 }, `Cannot list runs: ${error.message}`)));
      return;
    }
    if (closed) return;
    state.total = page.total;
    const ids = page.items.map((r) => r.id).join(',');
    const same = page.items.length > 0 && ids === state.items.map((r) => r.id).join(','); // an empty page: its message
    state.items = page.items;
    if (same) {
      for (const run of page.items) updateRow(rows.get(run.id), run);
    } else {
      rows.clear();
      clear(tbody);
      if (!page.items.length) tbody.append(h('tr', {}, h('td.empty', { colspan: 13 }, emptyState())));
      for (const run of page.items) tbody.append(renderRow(run));
    }
    renderPager();
    schedulePoll();
  }

  /** No runs at all: where a new user starts (the quickstart preset); otherwise the filters match none. */
  function emptyState() {
    if (state.status || state.search.trim() || state.mine || state.study || state.offset) return 'No runs match.';
    const start = can('operator')
      ? [h('a.btn.btn-primary', { href: '#/launch?preset=quickstart', 'data-role': 'quickstart' }, 'Launch the quickstart'),
        ' opens the launch form on the quickstart preset: a small Transformer trained on grapheme-to-phoneme '
        + 'pairs across 2 clusters × 4 devices. Press "Check & pre-flight" to see its first round per device, then Launch.']
      : ['Runs are launched by operators: ask an administrator for the operator role, then open Launch, ',
        'where the form starts on the quickstart preset.'];
    return h('div.empty-start', { 'data-role': 'no-runs' }, h('p', {}, h('strong', {}, 'No runs yet.')), h('p', {}, start));
  }

  function schedulePoll() {
    clearTimeout(pollTimer);
    const active = state.items.some((r) => r.status === 'queued' || r.status === 'running');
    if (active && !closed) pollTimer = setTimeout(() => { if (!document.hidden) load(); else schedulePoll(); }, POLL_MS);
  }

  function scheduleReload() {
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(load, 200);
  }

  function onStatus(event) {
    const row = rows.get(event.run_id);
    if (row) {
      updateRow(row, { status: event.status, rounds_done: event.rounds_done, total_rounds: event.total_rounds, error: event.error, cancel_requested: event.status === 'running' ? row.run.cancel_requested : false });
    } else if (state.offset === 0) {
      scheduleReload();
    }
    schedulePoll();
  }

  const unsubscribe = subscribe('/api/runs/events', { status: onStatus }, {
    onOpen: () => { live.textContent = '● live'; },
    onError: (readyState) => { live.textContent = readyState === EventSource.CLOSED ? 'live updates stopped' : 'reconnecting…'; },
  });

  let searchTimer = null;
  statusSelect.addEventListener('change', () => { state.status = statusSelect.value; state.offset = 0; load(); });
  searchInput.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { state.search = searchInput.value; state.offset = 0; load(); }, 250);
  });
  mineBox.addEventListener('change', () => { state.mine = mineBox.checked; state.offset = 0; load(); });
  compareButton.addEventListener('click', () => {
    location.hash = `#/compare?ids=${[...state.selected].sort((a, b) => a - b).join(',')}`;
  });

  load();
  return {
    unmount() {
      closed = true;
      unsubscribe();
      clearTimeout(pollTimer);
      clearTimeout(reloadTimer);
      clearTimeout(searchTimer);
    },
  };
}
