// The timeline (Gantt) of one cluster in one stored round, from GET /api/runs/{id}/timeline: the
// redistribution phase (the averaged model to the CU, moved optimizer state to the CU, each device's
// segment from the CU), then the first pipeline iteration from redistribution_s on. A row per
// participant (CU, devices, edge server); the upper half of a row is computing (forward, backward),
// the lower half the link (send, receive, and the redistribution's transfers); labels are micro-batch
// numbers. A device that recomputes its activations has longer backward bars (they run its forward
// again): hover and the note under the chart say so.
// Until the user picks a round it follows the run: the newest round, at most one timeline every
// FOLLOW_MS (each is the round's state rebuilt on the server), the round box showing the round drawn
// or loading. The round the user picks (the round box, a chart's point, the decision log) is told to
// ``onChoose`` so that the rest of the view (the decision's explanation) shows the same round.

import { get } from '../api.js';
import { h, uid } from '../dom.js';
import { formatValue } from '../format.js';
import { PLOT_CONFIG, baseLayout, plotly, purge } from '../plot.js';
import { RECOMPUTE_MARK } from './recompute.js';

const FOLLOW_MS = 1000;

const KINDS = [
  { kind: 'forward', color: '#1f77b4', offset: -0.42 },
  { kind: 'backward', color: '#ff7f0e', offset: -0.42 },
  { kind: 'send', color: '#2ca02c', offset: 0.02 },
  { kind: 'receive', color: '#9aa5b1', offset: 0.02 },
];
const REDISTRIBUTION = { name: 'redistribution', color: '#9467bd', offset: 0.02 };

function bars(events, { name, color, offset }, text, hover, note = () => '') {
  return {
    type: 'bar', orientation: 'h', name,
    y: events.map((e) => e.participant),
    base: events.map((e) => e.start_s * 1000),
    x: events.map((e) => Math.max((e.end_s - e.start_s) * 1000, 1e-9)),
    offset, width: 0.4,
    text: events.map(text), textposition: 'inside', insidetextanchor: 'middle',
    textfont: { size: 10, color: '#fff' }, constraintext: 'both',
    marker: { color, line: { color: '#ffffff', width: 0.5 } },
    customdata: events.map((e) => [e.microbatch, e.peer || '—', e.start_s * 1000, e.end_s * 1000, e.label || '', e.kind, note(e)]),
    hovertemplate: hover,
  };
}

function participantOrder(names) {
  const rank = (p) => {
    if (p === 'cu') return [0, 0];
    if (p === 'edge') return [2, 0];
    const match = /^c(\d+)-d(\d+)$/.exec(p);
    return match ? [1, Number(match[2])] : [1, 1e6];
  };
  return [...names].sort((a, b) => {
    const [ra, ia] = rank(a);
    const [rb, ib] = rank(b);
    return ra - rb || ia - ib || a.localeCompare(b);
  });
}

/** What the note under the chart says of the devices ``shown`` that recompute ('' for none). */
function recomputeNote(shown) {
  if (!shown.length) return '';
  const [verb, their] = shown.length > 1 ? ['recompute', 'their'] : ['recomputes', 'its'];
  return ` ${RECOMPUTE_MARK} ${shown.join(', ')} ${verb} ${their} activations in backward: ${their} backward bars include the forward again.`;
}

export class GanttView {
  /** ``onChoose(round)``: the user picked ``round`` (not called for the rounds followed).
   * ``recomputing(round)``: a promise of the ids of the devices that recompute in that round. */
  constructor(runId, numClusters, { onChoose = () => {}, recomputing = async () => new Set() } = {}) {
    this.runId = runId;
    this.onChoose = onChoose;
    this.recomputing = recomputing;
    const roundId = uid('gantt-round');
    const clusterId = uid('gantt-cluster');
    this.roundInput = h('input', { id: roundId, type: 'number', min: 0, step: 1, inputmode: 'numeric', style: 'width: 7em' });
    this.clusterSelect = h('select', { id: clusterId },
      Array.from({ length: numClusters }, (_, n) => h('option', { value: n }, `cluster ${n}`)));
    this.button = h('button.btn', { type: 'submit' }, 'Show timeline');
    this.note = h('p.chart-note', { 'aria-live': 'polite' }, 'Pick a stored round (or click a point on a chart).');
    this.el = h('div.chart.chart-tall', { id: 'chart-gantt', 'data-chart': 'gantt', role: 'img', 'aria-label': 'pipeline timeline of one round' });
    this.panel = h('section.chart-panel', { id: 'gantt' },
      h('h3', {}, 'Pipeline timeline (Gantt)'),
      h('form.row', { onsubmit: (e) => { e.preventDefault(); this.show(); } },
        h('div.control', {}, h('label', { for: roundId }, 'Round'), this.roundInput),
        h('div.control', {}, h('label', { for: clusterId }, 'Cluster'), this.clusterSelect),
        this.button),
      this.note, this.el);
    this.userChose = false;
    this.followed = -1; // the newest round suggested while following the run
    this.followTimer = null;
    this.lastFollowMs = -Infinity;
    this.requests = 0;
    this.roundInput.addEventListener('input', () => this.choose());
    this.button.addEventListener('click', () => this.choose());
  }

  /** The run's newest round is ``round``: drawn while the view follows the run (the user has not
   * picked a round), at most one timeline every FOLLOW_MS; older rounds are ignored. */
  suggest(round) {
    if (this.userChose || round <= this.followed) return;
    this.followed = round;
    if (this.followTimer !== null) return; // the newest is drawn when it fires
    const wait = Math.max(0, this.lastFollowMs + FOLLOW_MS - performance.now());
    this.followTimer = setTimeout(() => {
      this.followTimer = null;
      this.lastFollowMs = performance.now();
      if (!this.userChose) this.load(this.followed);
    }, wait);
  }

  /** Follow the run again: draw ``round`` (the newest) and every newer one. */
  follow(round) {
    this.userChose = false;
    this.followed = -1;
    if (round >= 0) this.suggest(round);
  }

  /** The user picked a round: the view stops following the run. */
  choose() {
    this.userChose = true;
    clearTimeout(this.followTimer);
    this.followTimer = null;
  }

  /** Draw the round the user picked: ``round``, or the one typed in the round box. */
  show(round) {
    if (round !== undefined) this.roundInput.value = round;
    this.choose();
    const r = Number(this.roundInput.value);
    if (this.roundInput.value === '' || !Number.isInteger(r)) {
      this.note.textContent = 'Enter a round number.';
      return;
    }
    this.onChoose(r);
    this.load(r);
  }

  async load(round) {
    const cluster = Number(this.clusterSelect.value);
    // never under the user's caret: a followed round arriving while they type would mix into their number
    if (document.activeElement !== this.roundInput) this.roundInput.value = round;
    this.note.textContent = `Loading round ${round}…`;
    // only the newest request draws: a followed round still loading must not replace the one the
    // user asked for after it
    this.requests += 1;
    const request = this.requests;
    try {
      const [timeline, recomputing] = await Promise.all([
        get(`/api/runs/${this.runId}/timeline`, { round, cluster }),
        this.recomputing(round),
      ]);
      if (request === this.requests) this.draw(timeline, recomputing);
    } catch (error) {
      if (request !== this.requests) return;
      this.note.textContent = error.message;
      purge(this.el);
    }
  }

  /** ``recomputing``: the ids of the devices that recompute in the timeline's round. */
  draw(t, recomputing = new Set()) {
    const participants = participantOrder(new Set(t.events.map((e) => e.participant)));
    const pipeline = t.events.filter((e) => e.phase !== 'redistribution');
    const again = (e) => (e.kind === 'backward' && recomputing.has(e.participant) ? ` (${RECOMPUTE_MARK} with the forward again)` : '');
    const traces = KINDS.map((def) => bars(
      pipeline.filter((e) => e.kind === def.kind), { ...def, name: def.kind }, (e) => String(e.microbatch),
      `%{y} · ${def.kind} micro-batch %{customdata[0]}%{customdata[6]}<br>%{customdata[2]:.4~g} → %{customdata[3]:.4~g} ms<br>peer %{customdata[1]}<extra></extra>`,
      again,
    ));
    traces.push(bars(
      t.events.filter((e) => e.phase === 'redistribution'), REDISTRIBUTION, () => '',
      '%{y} · redistribution %{customdata[5]}: %{customdata[4]}<br>%{customdata[2]:.4~g} → %{customdata[3]:.4~g} ms<br>peer %{customdata[1]}<extra></extra>',
    ));
    const start = t.redistribution_s * 1000;
    const layout = baseLayout({
      barmode: 'overlay', showlegend: true,
      margin: { l: 64, r: 12, t: 28, b: 44 },
      xaxis: { title: { text: 'time in the round (ms, modeled): redistribution, then the first iteration' }, gridcolor: '#eef1f5', zeroline: false, automargin: true },
      yaxis: { type: 'category', categoryorder: 'array', categoryarray: participants, autorange: 'reversed', automargin: true },
      shapes: [{ type: 'line', xref: 'x', yref: 'paper', x0: start, x1: start, y0: 0, y1: 1, line: { color: '#5d6b7c', width: 1, dash: 'dot' } }],
    });
    plotly().react(this.el, traces, layout, PLOT_CONFIG);
    const shown = participants.filter((p) => recomputing.has(p));
    this.note.textContent = `Round ${t.round}, cluster ${t.cluster}: redistribution ${formatValue(t.redistribution_s, 's')}, `
      + `then the first iteration (${t.schedule}, M = ${t.num_microbatches} micro-batches, makespan ${formatValue(t.makespan_s, 's')}). `
      + 'Upper half of a row: compute; lower half: link.'
      + recomputeNote(shown);
    this.el.dataset.round = String(t.round);
    this.el.dataset.recomputing = shown.join(' ');
  }

  destroy() {
    clearTimeout(this.followTimer);
    purge(this.el);
  }
}
