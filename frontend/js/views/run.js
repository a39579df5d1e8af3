// One run, live: header and actions, summary tiles, per-device charts, measured vs modeled figures
// (distributed executor), segment allocation, the pipeline Gantt of a chosen round,
// loss/eval/latency/objective curves, the explanation of a round's decision and the decision log.
// The Gantt and the explanation show the newest round until the user picks one (a chart's point,
// the Gantt's round box, a round of the decision log): then both show that round. The decision log,
// the current cut and the Gantt mark the devices that recompute their activations (recompute.js).
//
// Loading, in six requests: the run's detail fixes R = rounds_done - 1 and the id of its latest live
// event; the per-device series (one request for every metric), the round series and the decision
// log are asked for rounds <= R (server-side downsampled), then the run's event stream
// (/api/runs/{id}/events?after=<that id>) adds rounds > R; the tiles' exact figures (/api/compare)
// and the Gantt of round R come last. Live rounds are buffered and drawn once per animation frame:
// charts on screen at once (one extendTraces each), charts off screen when the browser is idle or
// when they scroll into view (the segment charts on a schedule of their own, segments.js). A big
// network (more than 16 devices) opens on cluster 0; other clusters load when chosen.
//
// Every curve (per-device and round charts) is drawn against the round or the modeled elapsed time
// (the "X axis" control, kept in localStorage). The history's series carry both; a live round's
// elapsed time is the view's running sum: the /rounds answer's elapsed_s (at the end of round R)
// plus each newer round's latency_s, in order. Switching redraws from what the charts hold.

import { get } from '../api.js';
import { h, clear, statusBadge, progressBar, uid } from '../dom.js';
import { formatNumber, formatTime } from '../format.js';
import { subscribe } from '../live.js';
import { runActions } from '../run-actions.js';
import { nowUnixMs, recordDraw, recordView, stats } from '../stats.js';
import { roundOfPoint, savedXAxis, xAxisControl } from '../plot.js';
import { DEVICE_CHARTS, DEVICE_FIGURES, DeviceCharts, limitMetrics, seriesMetrics } from '../run/device-charts.js';
import { RoundChart, emptyReason, roundChartsFor, roundFields } from '../run/round-charts.js';
import { SegmentCharts } from '../run/segments.js';
import { GanttView } from '../run/gantt.js';
import { DECISION_PAGE, DecisionLog } from '../run/decisions.js';
import { ExplanationView } from '../run/explanation.js';
import { RecomputeLookup } from '../run/recompute.js';
import { Tiles } from '../run/tiles.js';
import { MEASURED_ROUNDS, MeasuredView, isMeasuredRun } from '../run/measured.js';

const TERMINAL = ['succeeded', 'failed', 'cancelled'];
const DEVICE_POINTS = 200; // per device and metric, downsampled by the API (LTTB)
const ROUND_POINTS = 1000;
// the segment heatmap's δ_k of every device: bucket means, so every device has the same columns
const HEATMAP_SERIES = 'num_blocks:150:mean';
const MANY_DEVICES = 16; // above this, the per-device charts open on one cluster
const RECENT_ROUNDS = 1000; // live rounds kept to fill in devices loaded later
const OFFSCREEN_MS = 2000;

function deviceIds(config) {
  const ids = [];
  for (let n = 0; n < config.network.num_clusters; n += 1) {
    for (let k = 0; k < config.network.devices_per_cluster; k += 1) ids.push(`c${n}-d${k}`);
  }
  return ids;
}

/**
 * The cost model's figures of round ``round`` per device ({device_id: {metric: value}}) from the
 * history loaded with the page, or null if it lacks one: an LTTB series (and a limit's two points)
 * ends with the round it was asked up to, idle_s is asked with two points for this, and δ_k is the
 * round's decision (the heatmap's last column is a mean).
 */
function modeledRound(history, decision, round) {
  if (!decision || decision.round !== round) return null;
  const modeled = {};
  for (const cluster of decision.decision.clusters || []) {
    for (const d of cluster.devices) modeled[d.device] = { num_blocks: d.num_blocks };
  }
  for (const metric of ['memory_bytes', 'compute_s', 'comm_s', 'idle_s']) {
    for (const [device, figures] of Object.entries(modeled)) {
      const series = history[metric]?.[device];
      const last = series ? series.round.length - 1 : -1;
      if (last < 0 || series.round[last] !== round) return null;
      figures[metric] = series.value[last];
    }
  }
  return modeled;
}

/** "llama causal_lm" (a Hugging Face family) or "builtin seq2seq". */
function modelLabel(model) {
  return `${model.source === 'transformers' && model.architecture ? model.architecture : 'builtin'} ${model.kind}`;
}

const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));

export function mountRun(main, { runId }) {
  const started = performance.now();
  let closed = false;
  let unsubscribe = null;
  let run = null;
  let devices = [];
  let lastRound = -1; // the newest round drawn
  let pending = [];
  let frame = null;
  let idle = null;
  let xAxis = savedXAxis(); // 'round' or 'elapsed_s' (X_AXES)
  // modeled elapsed time (s) at the end of the newest round stamped: undefined until the history's
  // answer says where the clock stands (rounds received meanwhile wait in ``unstamped``), null if
  // that failed (live rounds are then drawn per round only)
  let elapsed;
  const unstamped = [];
  const recent = [];
  const loaded = new Set();
  const onScreen = new Set();
  const parts = { device: [], round: [], segments: null, gantt: null, decisions: null, explanation: null, tiles: null, measured: null, recompute: null };
  // what the empty round charts say why they are empty from (emptyReason): filled in by the history
  // and every live round
  const facts = { executor: null, roundsDone: 0, multiMicrobatch: null };
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const chart = entry.target.chart;
      if (chart === parts.segments) {
        chart.setVisible(entry.isIntersecting);
      } else if (entry.isIntersecting) {
        onScreen.add(chart);
        applyPending(chart);
      } else {
        onScreen.delete(chart);
      }
    }
  }, { rootMargin: '0px' });

  const head = h('div.page-head');
  const meta = h('p.small.muted');
  const errorBox = h('div.notice.notice-warn', { hidden: true, role: 'status' });
  const liveNote = h('span.small.muted', { 'aria-live': 'polite' });
  const body = h('div', {}, h('p.muted', {}, 'Loading the run…'));
  main.append(head, meta, errorBox, body);

  function renderHead() {
    clear(head).append(
      h('h1', {}, run.name), statusBadge(run.status), progressBar(run.rounds_done, run.total_rounds), liveNote,
      h('div.spacer'),
      runActions(run, { onChanged: refreshDetail }),
      h('a.btn.btn-small', { href: `/api/runs/${run.id}/export?format=csv&table=rounds`, download: '' }, 'Rounds CSV'),
      h('a.btn.btn-small', { href: `/api/runs/${run.id}/export?format=csv&table=devices`, download: '' }, 'Devices CSV'),
      h('a.btn.btn-small', { href: `#/compare?ids=${run.id}` }, 'Compare…'),
    );
    const s = run.config.scheduler;
    const n = run.config.network;
    clear(meta).append(
      `#${run.id} · policy ${run.policy} · V = ${formatNumber(s.V)} · ${n.num_clusters} clusters × ${n.devices_per_cluster} devices · `,
      `${modelLabel(run.config.model)} · ${run.config.model.num_blocks} TEBs · executor ${run.executor} · created ${formatTime(run.created_at)}`,
      ...(run.parent_run_id ? [' · fork of ', h('a', { href: `#/runs/${run.parent_run_id}` }, `#${run.parent_run_id}`), ` at round ${run.fork_round}`] : []),
      ' · owner ', h('span', { 'data-owner': '' }, run.owner_name ?? '—'),
    );
    errorBox.hidden = !run.error;
    errorBox.textContent = run.error ? `Error: ${run.error}` : '';
  }

  async function refreshDetail() {
    try {
      run = await get(`/api/runs/${runId}`);
      if (!closed) renderHead();
    } catch {
      /* keep what is shown */
    }
  }

  // -- which devices the per-device charts show ------------------------------------------------------

  function initialDevices() {
    return devices.length > MANY_DEVICES ? devices.filter((d) => d.startsWith('c0-')) : devices;
  }

  /**
   * The per-device series of rounds <= ``to`` of the devices ``wanted``, in one request:
   * {metric: {device: {round, value}}}. ``extra``: more metric parameters (the first load's heatmap
   * of every device and the measured view's idle_s).
   */
  async function deviceHistory(wanted, to, extra = []) {
    if (to < 0) return {};
    const subset = wanted.length === devices.length ? {} : { device_id: wanted };
    const metric = [
      ...seriesMetrics(),
      // capacity and budget are constant per device: their first and last rounds say it all
      ...limitMetrics().map((m) => `${m}:2`),
      ...extra,
    ];
    const everyDevice = extra.includes(HEATMAP_SERIES) && subset.device_id ? 'num_blocks' : undefined;
    const data = await get(`/api/runs/${run.id}/devices`, { metric, max_points: DEVICE_POINTS, to, ...subset, all_devices: everyDevice });
    return Object.fromEntries(Object.entries(data.metrics).map(([name, m]) => [name, m.series]));
  }

  async function showDevices(wanted) {
    const missing = wanted.filter((d) => !loaded.has(d));
    if (missing.length) {
      missing.forEach((d) => loaded.add(d));
      const to = lastRound;
      const history = await deviceHistory(missing, to);
      if (closed) return;
      const only = new Set(missing);
      const later = recent.filter((e) => e.round.round > to);
      for (const chart of parts.device) {
        chart.addDevices(history, missing);
        if (later.length) chart.extend(later, only);
      }
    }
    const shown = new Set(wanted);
    for (const chart of parts.device) chart.filter((d) => shown.has(d));
  }

  function deviceFilter(numClusters, initial) {
    const id = uid('device-filter');
    const select = h('select', { id }, h('option', { value: '' }, `all ${devices.length} devices`),
      Array.from({ length: numClusters }, (_, n) => h('option', { value: `c${n}-` }, `cluster ${n}`)));
    select.value = initial.length === devices.length ? '' : 'c0-';
    select.addEventListener('change', () => {
      const prefix = select.value;
      showDevices(devices.filter((d) => !prefix || d.startsWith(prefix)));
    });
    return h('div.control', {}, h('label', { for: id }, 'Devices shown'), select);
  }

  function layout(initial) {
    const n = run.config.network;
    parts.tiles = new Tiles(run.config);
    // the per-device charts: two figures of stacked subplots; only the one on screen redraws live
    parts.device = DEVICE_FIGURES.map(({ id, charts }) => new DeviceCharts(DEVICE_CHARTS.filter((c) => charts.includes(c.id)), devices, id, xAxis));
    facts.executor = run.executor;
    parts.round = roundChartsFor(run.config).map((def) => new RoundChart(def, xAxis, () => emptyReason(def, facts)));
    parts.segments = new SegmentCharts(devices, run.config);
    parts.recompute = new RecomputeLookup(run.id, run.config);
    parts.gantt = new GanttView(run.id, n.num_clusters, {
      onChoose: (round) => {
        parts.explanation.select(round);
        parts.decisions.mark(round);
      },
      recomputing: (round) => parts.recompute.devices(round),
    });
    parts.decisions = new DecisionLog(run.id, run.config, {
      onSelect: (round, item) => {
        parts.explanation.remember([item]);
        parts.gantt.show(round);
      },
    });
    parts.explanation = new ExplanationView(run.id, {
      onFollow: (round) => {
        parts.decisions.mark(null);
        parts.gantt.follow(round);
      },
    });
    parts.measured = isMeasuredRun(run) ? new MeasuredView(run) : null;
    clear(body).append(
      parts.tiles.el,
      h('div.section-title', {}, h('h2', {}, 'Per device'), deviceFilter(n.num_clusters, initial), xAxisControl(xAxis, setXAxis),
        h('span.small.muted', {}, devices.length > 8 ? `${devices.length} devices: hover a line for its name` : '')),
      ...parts.device.map((c) => c.panel),
      ...(parts.measured ? [
        h('div.section-title', {}, h('h2', {}, 'Measured vs modeled'),
          h('span.small.muted', {}, 'what each rank of the distributed executor measured, beside the cost model')),
        h('div.grid-2', {}, parts.measured.panels),
        parts.measured.table,
      ] : []),
      h('div.section-title', {}, h('h2', {}, 'Segments and pipeline')),
      h('div.grid-2', {}, parts.segments.panels, parts.gantt.panel),
      h('div.section-title', {}, h('h2', {}, 'Training and objective')),
      h('div.grid', {}, parts.round.map((c) => c.panel)),
      h('div.section-title', {}, h('h2', {}, 'Decisions'),
        h('span.small.muted', {}, 'why each round\'s decision is what it is, and the log of them all')),
      parts.explanation.panel,
      parts.decisions.panel,
    );
    for (const chart of [...parts.device, ...parts.round]) {
      chart.el.chart = chart;
      chart.pending = [];
      observer.observe(chart.el);
    }
    parts.segments.heatEl.chart = parts.segments;
    observer.observe(parts.segments.heatEl);
  }

  /** Every curve against ``axis`` from now on (the segment heatmap and the Gantt stay per round). */
  function setXAxis(axis) {
    xAxis = axis;
    for (const chart of [...parts.device, ...parts.round]) chart.setXAxis(axis);
  }

  function wireClicks() {
    for (const chart of [...parts.device, ...parts.round]) {
      chart.el.on('plotly_click', (event) => {
        const point = event.points && event.points[0];
        const round = point ? roundOfPoint(point, xAxis) : null;
        if (Number.isInteger(round)) parts.gantt.show(round);
      });
    }
  }

  // -- the modeled clock of live rounds -----------------------------------------------------------

  function stamp(event) {
    if (elapsed !== null) elapsed += event.round.latency_s;
    event.elapsed_s = elapsed;
  }

  /** The clock stands at ``value`` at the end of round R (null: unknown); stamp the rounds waiting. */
  function startClock(value) {
    elapsed = value;
    unstamped.splice(0).forEach(stamp);
  }

  async function loadHistory(initial) {
    const R = run.rounds_done - 1;
    const empty = R < 0;
    loaded.clear();
    initial.forEach((d) => loaded.add(d));
    // the decision log's page, and for a measured run every round the measured view draws
    const decisionRounds = parts.measured ? MEASURED_ROUNDS : DECISION_PAGE;
    const [history, rounds, decisionItems] = await Promise.all([
      deviceHistory(initial, R, [HEATMAP_SERIES, ...(parts.measured ? ['idle_s:2'] : [])]),
      // and num_microbatches_mean: a round above 1 trained a cluster with M ≥ 2 (what B_noise needs)
      empty ? { series: {} } : get(`/api/runs/${run.id}/rounds`, { fields: [...roundFields(parts.round.map((c) => c.def)), 'num_microbatches_mean'], max_points: ROUND_POINTS, to: R }),
      empty ? [] : get(`/api/runs/${run.id}/decisions`, { from: Math.max(0, R - decisionRounds + 1), to: R, limit: decisionRounds })
        .then((page) => page.items),
    ]);
    if (closed) return;
    startClock(empty ? 0 : rounds.elapsed_s);
    const latestDecision = decisionItems.length ? decisionItems[decisionItems.length - 1] : null;
    facts.roundsDone = Math.max(facts.roundsDone, R + 1);
    facts.multiMicrobatch = (rounds.series.num_microbatches_mean?.value || []).some((m) => m > 1);
    parts.recompute.remember(decisionItems);
    await parts.decisions.load(R, decisionItems);
    parts.explanation.load(decisionItems);
    // the measured points' elapsed time: the round latency series has every round of a measured
    // (distributed, short) run; a round it lacks is drawn per round only
    const clock = new Map((rounds.series.latency_s?.round || []).map((r, i) => [r, rounds.series.latency_s.elapsed_s[i]]));
    const measured = parts.measured
      ? (await parts.measured.load(decisionItems, modeledRound(history, latestDecision, R))).map((item) => ({ ...item, elapsed_s: clock.get(item.round) ?? null }))
      : [];
    if (closed) return;
    const fetched = performance.now();
    // one chart per task: the page keeps answering input while a big run draws
    for (const chart of parts.device) {
      chart.draw(history, initial);
      chart.addMeasuredHistory(measured);
      await nextFrame();
    }
    for (const chart of parts.round) {
      chart.draw(rounds.series);
      await nextFrame();
    }
    parts.segments.draw(history.num_blocks || {});
    if (latestDecision) parts.segments.showDecision(latestDecision);
    wireClicks();
    recordView('run', { runId: run.id, fetchMs: fetched - started, readyMs: performance.now() - started, rounds: run.rounds_done, devices: devices.length });
    body.dataset.ready = 'true';
    if (closed) return;
    // the exact summary figures and the Gantt come after the charts
    const compareRow = empty ? null : await get('/api/compare', { run_ids: run.id }).then((c) => c.runs[0]).catch(() => null);
    if (closed) return;
    parts.tiles.reset(compareRow, run.total_rounds, devices.length);
    if (recent.length) parts.tiles.extend(recent);
    // the newest round: R, or a live round drawn meanwhile (the Gantt ignores an older one)
    if (R >= 0) parts.gantt.suggest(R);
  }

  // -- live rounds -----------------------------------------------------------------------------------

  function applyPending(chart) {
    if (!chart.pending || !chart.pending.length) return;
    const rounds = chart.pending;
    chart.pending = [];
    chart.extend(rounds);
  }

  function drainOffscreen() {
    const waiting = [...parts.device, ...parts.round].find((c) => c.pending.length);
    if (!waiting) {
      idle = null;
      return;
    }
    applyPending(waiting);
    idle = window.requestIdleCallback ? requestIdleCallback(drainOffscreen, { timeout: 2000 }) : setTimeout(drainOffscreen, 0);
  }

  // off-screen charts catch up every OFFSCREEN_MS, one chart per idle period: a redraw costs about
  // the same for one round as for many, so batching keeps the main thread free for what is on screen
  function scheduleIdle() {
    if (idle !== null || closed) return;
    idle = setTimeout(() => {
      idle = window.requestIdleCallback ? requestIdleCallback(drainOffscreen, { timeout: 2000 }) : setTimeout(drainOffscreen, 0);
    }, OFFSCREEN_MS);
  }

  function flush() {
    frame = null;
    if (closed || !pending.length || !body.dataset.ready) return;
    const flushStartUnixMs = nowUnixMs();
    const batch = pending;
    pending = [];
    for (const { round } of batch) {
      facts.roundsDone = Math.max(facts.roundsDone, round.round + 1);
      if ((round.num_microbatches || []).some((m) => m >= 2)) facts.multiMicrobatch = true;
    }
    for (const chart of [...parts.device, ...parts.round]) {
      if (onScreen.has(chart)) {
        applyPending(chart);
        chart.extend(batch);
      } else {
        chart.pending.push(...batch);
      }
    }
    parts.recompute.remember(batch.map((event) => event.round));
    parts.segments.extend(batch);
    parts.decisions.extend(batch);
    parts.explanation.extend(batch);
    if (parts.measured) parts.measured.extend(batch);
    if (parts.tiles.total !== undefined) parts.tiles.extend(batch);
    const newest = batch[batch.length - 1].round.round;
    parts.gantt.suggest(newest);
    run.rounds_done = Math.max(run.rounds_done, newest + 1);
    const bar = head.querySelector('.progress');
    if (bar) bar.replaceWith(progressBar(run.rounds_done, run.total_rounds));
    const drawn = nowUnixMs();
    stats.flushes += 1;
    for (const event of batch) {
      recordDraw({ runId: run.id, round: event.round.round, eventId: event.eventId, publishedUnixMs: event.published_unix_ms ?? null, receivedUnixMs: event.receivedUnixMs, flushStartUnixMs, drawnUnixMs: drawn });
    }
    scheduleIdle();
  }

  function scheduleFlush() {
    if (frame === null) frame = document.hidden ? setTimeout(flush, 50) : requestAnimationFrame(flush);
  }

  function onRound(data, id) {
    const round = data.round && data.round.round;
    if (!Number.isInteger(round) || round <= lastRound) return; // already drawn (history or stream)
    lastRound = round;
    if (elapsed === undefined) unstamped.push(data);
    else stamp(data);
    data.eventId = id;
    data.receivedUnixMs = nowUnixMs();
    pending.push(data);
    recent.push(data);
    if (recent.length > RECENT_ROUNDS) recent.splice(0, recent.length - RECENT_ROUNDS);
    scheduleFlush();
  }

  function onStatus(data) {
    if (data.run_id !== run.id) return;
    const before = run.status;
    run = { ...run, status: data.status, rounds_done: Math.max(run.rounds_done, data.rounds_done), error: data.error };
    if (before !== data.status) refreshDetail();
    if (TERMINAL.includes(data.status)) {
      liveNote.textContent = '';
      if (run.rounds_done > 0) parts.gantt.suggest(run.rounds_done - 1);
    }
  }

  function connect() {
    if (TERMINAL.includes(run.status)) return;
    liveNote.textContent = 'connecting…';
    // the events after those of the rounds the detail counted (rounds > R); onRound still drops any
    // round the page has drawn (by round index), whatever the stream sends
    const after = encodeURIComponent(run.last_event_id);
    unsubscribe = subscribe(`/api/runs/${run.id}/events?after=${after}`, { round: onRound, status: onStatus }, {
      onOpen: () => { liveNote.textContent = '● live'; },
      onError: (state) => {
        if (state === EventSource.CLOSED || TERMINAL.includes(run.status)) liveNote.textContent = '';
        else liveNote.textContent = 'reconnecting…';
      },
    });
  }

  async function start() {
    try {
      run = await get(`/api/runs/${runId}`);
    } catch (error) {
      clear(body).append(h('div.panel', {}, h('p.bad', {}, error.status === 404 ? `There is no run ${runId}.` : error.message)));
      return;
    }
    if (closed) return;
    renderHead();
    devices = deviceIds(run.config);
    const initial = initialDevices();
    layout(initial);
    lastRound = run.rounds_done - 1; // the history covers rounds <= R; the stream brings the rest
    // live rounds are buffered from now on; they are drawn once the history is on screen
    connect();
    try {
      await loadHistory(initial);
    } catch (error) {
      body.prepend(h('p.bad', {}, `Some figures failed to load: ${error.message}`));
      body.dataset.ready = 'true';
      if (elapsed === undefined) startClock(null);
    }
    scheduleFlush();
  }

  start();
  return {
    unmount() {
      closed = true;
      observer.disconnect();
      if (unsubscribe) unsubscribe();
      if (frame !== null) { cancelAnimationFrame(frame); clearTimeout(frame); }
      if (idle !== null) { clearTimeout(idle); if (window.cancelIdleCallback) cancelIdleCallback(idle); }
      for (const chart of [...parts.device, ...parts.round]) chart.destroy();
      if (parts.segments) parts.segments.destroy();
      if (parts.gantt) parts.gantt.destroy();
      if (parts.measured) parts.measured.destroy();
    },
  };
}
