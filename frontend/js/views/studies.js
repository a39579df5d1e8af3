// Studies: every study with its status and progress (GET /api/studies), and for operators a
// launcher of the server's presets (GET /api/studies/presets → POST /api/studies), with an optional
// number of rounds per run for a quicker look: fewer rounds than the preset is written for are said to
// show only the start of each run, with the preset's own word on what they cannot show. A study's own
// page is #/studies/{id} (views/study.js).

import { get, post } from '../api.js';
import { h, clear, progressBar, statusBadge, uid } from '../dom.js';
import { formatTime } from '../format.js';
import { can } from '../session.js';

/** The preset's definition with every run cut to ``rounds`` (an axis of one value is an override). */
export function withRounds(definition, rounds) {
  if (!rounds) return definition;
  const axes = (definition.axes || []).filter((axis) => axis.field !== 'training.rounds');
  return { ...definition, axes: [...axes, { field: 'training.rounds', values: [rounds] }] };
}

/** What ``rounds`` per run cannot show of ``preset`` (fewer than it is written for), or '' when nothing. */
export function fewerRoundsNote(preset, rounds) {
  if (!preset || !preset.rounds || !Number.isInteger(rounds) || rounds < 1 || rounds >= preset.rounds) return '';
  const why = preset.fewer_rounds || 'Its figures are meant as means over the whole run.';
  return `This preset is written for ${preset.rounds} rounds per run: ${rounds} show only the start of each run, `
    + `not the comparison it is for. ${why}`;
}

function launcher() {
  const ids = { preset: uid('study-preset'), rounds: uid('study-rounds'), error: uid('study-error'), note: uid('study-rounds-note') };
  const preset = h('select', { id: ids.preset, disabled: true }, h('option', { value: '' }, 'loading…'));
  const about = h('p.small.muted', { 'aria-live': 'polite' });
  const rounds = h('input', { id: ids.rounds, type: 'text', inputmode: 'numeric', placeholder: 'as in the preset', autocomplete: 'off', 'aria-describedby': ids.note });
  const note = h('p.small', { id: ids.note, 'data-role': 'fewer-rounds', 'aria-live': 'polite', hidden: true });
  const error = h('div.error-summary', { id: ids.error, role: 'alert', hidden: true });
  const submit = h('button.btn.btn-primary', { type: 'submit', disabled: true }, 'Launch study');
  let presets = [];
  const form = h('form.row', { novalidate: true, id: 'study-launch', 'aria-describedby': ids.error },
    h('div.control', {}, h('label', { for: ids.preset }, 'Preset'), preset),
    h('div.control', {}, h('label', { for: ids.rounds }, 'Rounds per run'), rounds),
    submit);
  const show = () => {
    const chosen = presets.find((p) => p.name === preset.value);
    about.textContent = chosen ? chosen.description : '';
    rounds.placeholder = chosen?.rounds ? `${chosen.rounds}, as in the preset` : 'as in the preset';
    const text = rounds.value.trim();
    note.textContent = fewerRoundsNote(chosen, text === '' ? null : Number(text));
    note.hidden = !note.textContent;
  };
  preset.addEventListener('change', show);
  rounds.addEventListener('input', show);
  get('/api/studies/presets').then((list) => {
    presets = list;
    clear(preset).append(...list.map((p) => h('option', { value: p.name }, p.definition?.name || p.name)));
    preset.disabled = submit.disabled = !list.length;
    show();
  }).catch((err) => {
    about.textContent = `Cannot read the presets: ${err.message}`;
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    const chosen = presets.find((p) => p.name === preset.value);
    if (!chosen) return;
    const text = rounds.value.trim();
    const count = text === '' ? null : Number(text);
    submit.disabled = true;
    submit.textContent = 'Checking every run…';
    try {
      const created = await post('/api/studies', withRounds(chosen.definition, Number.isFinite(count) ? count : text));
      location.hash = `#/studies/${created.id}`;
    } catch (err) {
      clear(error).append(h('p', {}, err.message),
        h('ul', {}, err.details.slice(0, 10).map((d) => h('li', {}, [d.field, d.axis, d.message].filter(Boolean).join(' — ')))));
      error.hidden = false;
    } finally {
      submit.disabled = false;
      submit.textContent = 'Launch study';
    }
  });
  return h('section.panel', { 'aria-labelledby': 'study-launch-title' },
    h('h2', { id: 'study-launch-title' }, 'Launch a study'), form, note, about, error);
}

export function mountStudies(main) {
  let closed = false;
  const note = h('p.small.muted', { 'aria-live': 'polite' });
  const tbody = h('tbody');
  const page = h('div', { id: 'studies-page' },
    h('div.page-head', {}, h('h1', {}, 'Studies'), note),
    can('operator') ? launcher() : h('p.small.muted', { 'data-role': 'read-only' }, 'Launching studies needs the operator role.'),
    h('section.panel', {}, h('div.table-wrap', {}, h('table', { 'aria-label': 'Studies' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Study'), h('th', {}, 'Status'), h('th', {}, 'Runs'),
        h('th.num', {}, 'Cells'), h('th', {}, 'Owner'), h('th', {}, 'Created'))),
      tbody))));
  main.append(page);

  get('/api/studies').then((answer) => {
    if (closed) return;
    note.textContent = `${answer.total} stud${answer.total === 1 ? 'y' : 'ies'}`;
    clear(tbody);
    if (!answer.items.length) tbody.append(h('tr', {}, h('td.empty', { colspan: 6 }, 'No studies yet.')));
    for (const s of answer.items) {
      tbody.append(h('tr', { 'data-study-id': s.id },
        h('td', {}, h('a', { href: `#/studies/${s.id}` }, s.name)),
        h('td', {}, statusBadge(s.progress.status)),
        h('td', {}, progressBar(s.progress.runs_done, s.progress.runs_total)),
        h('td.num', {}, s.num_cells),
        h('td', {}, s.owner_name ?? '—'),
        h('td.small.nowrap', {}, formatTime(s.created_at))));
    }
    page.dataset.ready = 'true';
  }).catch((err) => {
    note.textContent = `Cannot list the studies: ${err.message}`;
  });
  return {
    unmount() {
      closed = true;
    },
  };
}
