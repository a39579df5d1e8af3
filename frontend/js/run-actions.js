// Cancel, resume, fork and delete of a run — shown only to those who may use them (its owner, an
// operator, or an admin: cancel/resume/fork; admin: delete). The API refuses them anyway. Cancel and
// delete ask first. And the download of its trained model, for everyone who may read the run.

import { ApiError, del, get, post } from './api.js';
import { h, toast, uid } from './dom.js';
import { can, mayAct } from './session.js';
import { showErrors, clearErrors } from './form/errors.js';

const ACTIVE = ['queued', 'running'];
const RESUMABLE = ['failed', 'cancelled'];
const SERVED = ['succeeded', 'cancelled']; // runs whose model GET /api/runs/{id}/model serves

export function runActions(run, { onChanged = () => {} } = {}) {
  const box = h('div.actions');
  box.append(...modelDownloads(run));
  if (!mayAct(run.owner_name)) return box;
  const act = async (button, fn) => {
    button.disabled = true;
    try {
      await fn();
      onChanged();
    } catch (error) {
      toast(error.message);
    } finally {
      button.disabled = false;
    }
  };
  if (ACTIVE.includes(run.status)) {
    const label = run.cancel_requested ? 'Cancelling…' : 'Cancel';
    const cancel = h('button.btn.btn-small.btn-danger', {
      type: 'button', 'aria-label': `Cancel run ${run.id}`, 'data-action': 'cancel', disabled: run.cancel_requested,
    }, label);
    cancel.addEventListener('click', () => {
      const when = run.status === 'queued' ? 'It will not start' : 'It stops after the round in progress';
      const question = `Cancel run ${run.id} (${run.name})? ${when}; the rounds done are kept, and Resume continues it.`;
      if (window.confirm(question)) act(cancel, () => post(`/api/runs/${run.id}/cancel`));
    });
    box.append(cancel);
  }
  if (RESUMABLE.includes(run.status)) {
    const resume = h('button.btn.btn-small', { type: 'button', 'aria-label': `Resume run ${run.id}`, 'data-action': 'resume' }, 'Resume');
    resume.addEventListener('click', () => act(resume, () => post(`/api/runs/${run.id}/resume`)));
    box.append(resume);
  }
  if (run.rounds_done > 0) {
    const fork = h('button.btn.btn-small', { type: 'button', 'aria-label': `Fork run ${run.id}`, 'data-action': 'fork' }, 'Fork');
    fork.addEventListener('click', () => openForkDialog(run));
    box.append(fork);
  }
  if (can('admin') && !ACTIVE.includes(run.status)) {
    const remove = h('button.btn.btn-small.btn-quiet', { type: 'button', 'aria-label': `Delete run ${run.id}`, 'data-action': 'delete' }, 'Delete');
    remove.addEventListener('click', () => {
      if (window.confirm(`Delete run ${run.id} (${run.name}) and all its records?`)) {
        act(remove, () => del(`/api/runs/${run.id}`));
      }
    });
    box.append(remove);
  }
  return box;
}

/** "Download model" (and, for a LoRA run, the adapter merged into its base) where the run page shows
 * a finished run that trained weights (the runs list's rows carry no config). */
function modelDownloads(run) {
  if (!run.config || run.executor === 'analytic' || !SERVED.includes(run.status) || run.rounds_done < 1) return [];
  const buttons = [downloadButton(run, false)];
  if (run.config.training?.peft) buttons.push(downloadButton(run, true));
  return buttons;
}

function downloadButton(run, merged) {
  const label = merged ? 'Download merged model' : 'Download model';
  const url = merged ? `/api/runs/${run.id}/model?merged=true` : `/api/runs/${run.id}/model`;
  const button = h('button.btn.btn-small', {
    type: 'button', 'aria-label': `${label} of run ${run.id}`, 'data-action': merged ? 'download-merged' : 'download',
    title: merged ? 'the LoRA adapter merged into its base: a whole model' : 'a tar archive of the model folder (docs/models.md)',
  }, label);
  button.addEventListener('click', async () => {
    button.disabled = true;
    button.textContent = 'Preparing…';
    try {
      await prepared(url);
      const link = h('a', { href: url, download: '', hidden: true });
      document.body.append(link);
      link.click(); // the browser streams the archive to disk
      link.remove();
    } catch (error) {
      toast(error.message);
    } finally {
      button.disabled = false;
      button.textContent = label;
    }
  });
  return button;
}

/** Ask for the archive and read only its status: the server builds it on the first request (or says
 * why it cannot), and the download that follows reads the built file. */
async function prepared(url) {
  const controller = new AbortController();
  const response = await fetch(url, { credentials: 'same-origin', signal: controller.signal });
  if (response.ok) {
    controller.abort(); // the body is the browser's download's to read
    return;
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  throw new ApiError(response.status, data?.error || { message: response.statusText });
}

function field(name, label, input, help) {
  const id = uid(`fork-${name}`);
  input.id = id;
  input.name = name;
  const errorId = `${id}-error`;
  input.setAttribute('aria-describedby', `${errorId} ${id}-help`);
  return h(
    'div.field',
    { 'data-path': name },
    h('label', { for: id }, label),
    input,
    h('span.help', { id: `${id}-help` }, help),
    h('p.field-error', { id: errorId, hidden: true }),
  );
}

/** The fork dialog: a new run from this run's state at round k, with another policy, V, segments or
 * number of rounds (a finished run continues from k = its rounds done with more rounds). */
export function openForkDialog(run) {
  const maxRound = run.rounds_done;
  const suggested = Math.max(0, Math.min(run.rounds_done, run.total_rounds - 1));
  const round = h('input', { type: 'number', min: 0, max: maxRound, step: 1, value: suggested, inputmode: 'numeric' });
  const rounds = h('input', { type: 'number', min: 1, step: 1, value: run.total_rounds, inputmode: 'numeric' });
  // a choice of the server's policies (no free text); the parent's stays first and selected
  const policy = h('select', {}, h('option', { value: run.policy }, run.policy));
  get('/api/config/policies')
    .then((names) => policy.append(...names.filter((p) => p !== run.policy).map((p) => h('option', { value: p }, p))))
    .catch(() => {});
  const V = h('input', { type: 'text', inputmode: 'decimal', placeholder: 'unchanged' });
  const segments = h('input', { type: 'text', placeholder: 'unchanged, e.g. 1,2,1,0' });
  const summary = h('div.error-summary', { role: 'alert', hidden: true });
  const submit = h('button.btn.btn-primary', { type: 'submit' }, 'Fork');
  const close = h('button.btn', { type: 'button' }, 'Close');
  const form = h(
    'form.stack',
    { method: 'dialog', novalidate: true },
    h('h2', {}, `Fork run ${run.id}`),
    h('p.muted.small', {}, 'The fork replays this run up to round k and runs the rest with the settings below.'),
    summary,
    field('round', 'Start at round k', round, `0 … ${maxRound}`),
    field('rounds', 'Rounds in all', rounds, `more than k; ${run.total_rounds} now: raise it to train on`),
    field('policy', 'Policy', policy, 'from round k on'),
    field('V', 'V (Lyapunov trade-off)', V, 'empty: keep the parent\'s'),
    field('segments', 'Segments (TEBs per device)', segments, 'policy "fixed" only; comma-separated'),
    h('div.row', {}, submit, close),
  );
  const dialog = h('dialog', { 'aria-label': `Fork run ${run.id}` }, form);
  document.body.append(dialog);
  close.addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => dialog.remove());
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearErrors(form, summary);
    const body = { round: numberOrText(round.value) };
    if (numberOrText(rounds.value) !== run.total_rounds) body.rounds = numberOrText(rounds.value);
    if (policy.value !== run.policy) body.policy = policy.value;
    if (V.value.trim()) body.V = numberOrText(V.value);
    if (segments.value.trim()) body.segments = segments.value.split(',').map((s) => numberOrText(s));
    submit.disabled = true;
    try {
      const created = await post(`/api/runs/${run.id}/fork`, body);
      dialog.close();
      location.hash = `#/runs/${created.id}`;
    } catch (error) {
      showErrors(form, summary, error, { prefixes: ['body.', 'config.scheduler.', 'config.'] });
    } finally {
      submit.disabled = false;
    }
  });
  dialog.showModal();
  round.focus();
}

function numberOrText(text) {
  const trimmed = String(text).trim();
  if (trimmed !== '' && Number.isFinite(Number(trimmed))) return Number(trimmed);
  return trimmed;
}
