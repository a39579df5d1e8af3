// Upload into the data directory (operators): choose the folder, a name and the file — for a
// checkpoint a folder name and its files, each sent as PUT /api/files/checkpoints/NAME/FILE (its
// config.json last, so the checkpoint is listed only once complete). The body is the file's bytes.
// The API's answers are shown as they come: 409 file_exists with an "Overwrite" choice, 413 (too large or a quota)
// next to the file, 422 (a name the API refuses) next to the name.

import { putBytes } from '../api.js';
import { h, clear, uid } from '../dom.js';
import { formatValue } from '../format.js';
import { FOLDERS, FOLDER_BY_NAME } from './folders.js';

/** /api/files/datasets/a.csv: each part of the name escaped, the slashes kept. */
export function fileUrl(name) {
  return `/api/files/${name.split('/').map(encodeURIComponent).join('/')}`;
}

function shell(path, label, control, help) {
  const id = control.id || uid('up');
  control.id = id;
  const helpEl = h('span.help', { id: `${id}-help` }, help);
  const error = h('p.field-error', { id: `${id}-error`, role: 'alert', hidden: true });
  control.setAttribute('aria-describedby', `${id}-help ${id}-error`);
  const el = h('div.field', { 'data-path': path }, h('label', { for: id }, label), control, helpEl, error);
  return { el, helpEl, error, control };
}

export function createUploadForm({ onUploaded }) {
  const folder = shell('folder', 'Folder', h('select', {}, FOLDERS.map((f) => h('option', { value: f.folder }, `${f.folder}/`))),
    'what kind of file');
  const name = shell('path', 'Name', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' }), '');
  const file = shell('body', 'File', h('input', { type: 'file' }), '');
  const target = h('p.small.muted', { 'data-role': 'target' });
  const submit = h('button.btn.btn-primary', { type: 'submit' }, 'Upload');
  const status = h('span.small', { 'aria-live': 'polite' });
  const summary = h('div.error-summary', { role: 'alert', hidden: true, tabindex: '-1' });
  const form = h('form.upload-form', { novalidate: true, 'aria-label': 'Upload a file' },
    h('h2', {}, 'Upload'),
    h('div.upload-fields', {}, folder.el, name.el, file.el),
    target, summary, h('div.row', {}, submit, status));
  let autoName = '';

  const chosen = () => FOLDER_BY_NAME[folder.control.value];
  const files = () => [...file.control.files];

  /** The upload's targets: [{name, file}] (a checkpoint's config.json last). */
  function targets() {
    const f = chosen();
    const typed = name.control.value.trim();
    if (f.kind === 'checkpoint') {
      const list = files().sort((a, b) => (a.name === 'config.json') - (b.name === 'config.json'));
      return list.map((one) => ({ name: `checkpoints/${typed}/${one.name}`, file: one }));
    }
    return files().slice(0, 1).map((one) => ({ name: `${f.folder}/${typed}`, file: one }));
  }

  function describe() {
    const f = chosen();
    const checkpoint = f.kind === 'checkpoint';
    name.el.querySelector('label').textContent = checkpoint ? 'Checkpoint name (a folder)' : 'File name';
    name.control.placeholder = checkpoint ? 'tiny-bert' : `my-data${f.suffixes[0]}`;
    name.helpEl.textContent = checkpoint
      ? 'letters, digits, . _ - ; config names it as checkpoints/NAME'
      : `letters, digits, . _ - ; ending in ${f.suffixes.join(', ')}`;
    file.el.querySelector('label').textContent = checkpoint ? 'Files' : 'File';
    file.control.multiple = checkpoint;
    file.control.accept = f.accept;
    file.helpEl.textContent = checkpoint
      ? 'every file save_pretrained wrote: config.json, model.safetensors, tokenizer files'
      : 'sent as it is, streamed from your disk';
    const list = targets();
    const typed = name.control.value.trim();
    if (!list.length) target.textContent = typed ? `Uploads to ${f.folder}/${typed}${checkpoint ? '/…' : ''}` : '';
    else if (checkpoint) target.textContent = `Uploads ${list.length} file(s) to checkpoints/${typed || 'NAME'}/ (${formatValue(list.reduce((s, t) => s + t.file.size, 0), 'bytes')})`;
    else target.textContent = `Uploads ${list[0].file.name} (${formatValue(list[0].file.size, 'bytes')}) as ${list[0].name}`;
  }

  function clearMessages() {
    summary.hidden = true;
    clear(summary);
    for (const part of [folder, name, file]) {
      part.error.hidden = true;
      part.error.textContent = '';
      part.control.removeAttribute('aria-invalid');
    }
  }

  function fieldError(part, message) {
    part.error.textContent = part.error.textContent ? `${part.error.textContent} · ${message}` : message;
    part.error.hidden = false;
    part.control.setAttribute('aria-invalid', 'true');
  }

  /** The API's refusals: each detail next to its field (path → name, body → file), all in the summary. */
  function showFailures(failures, overwriteAll) {
    const list = h('ul');
    for (const { target: t, error } of failures) {
      list.append(h('li', { 'data-status': error.status }, h('code', {}, t.name), ': ', error.message));
      for (const detail of error.details || []) {
        // the detail says what the path "is" to be; the message is the whole sentence
        if (detail.field === 'path') fieldError(name, error.message);
        else if (detail.field === 'body' || error.status === 413) fieldError(file, error.message);
      }
      if (error.status === 413 && !(error.details || []).length) fieldError(file, error.message);
    }
    const conflicts = failures.filter((f) => f.error.code === 'file_exists'); // other 409s: overwriting would not help
    summary.append(h('strong', {}, failures.length === 1 ? 'The upload was refused:' : `${failures.length} uploads were refused:`), list);
    if (conflicts.length) {
      const again = h('button.btn.btn-danger', { type: 'button' },
        conflicts.length === 1 ? `Overwrite ${conflicts[0].target.name}` : `Overwrite these ${conflicts.length} files`);
      again.addEventListener('click', () => overwriteAll(conflicts.map((c) => c.target)));
      summary.append(h('div.row', {}, again, h('span.small', {}, 'replaces what is stored under that name')));
    }
    summary.hidden = false;
    summary.focus();
  }

  async function upload(list, overwrite) {
    clearMessages();
    submit.disabled = true;
    const failures = [];
    let done = 0;
    for (const t of list) {
      status.textContent = `Uploading ${t.name} (${formatValue(t.file.size, 'bytes')})…`;
      try {
        await putBytes(fileUrl(t.name), t.file, overwrite ? { overwrite: true } : undefined);
        done += 1;
      } catch (error) {
        failures.push({ target: t, error });
      }
    }
    submit.disabled = false;
    status.textContent = done ? `Uploaded ${done} file(s).` : '';
    if (failures.length) showFailures(failures, (again) => upload(again, true));
    else {
      file.control.value = '';
      name.control.value = '';
      autoName = '';
      describe();
      status.textContent = `Uploaded ${done} file(s).`;
    }
    if (done) onUploaded();
  }

  folder.control.addEventListener('change', () => {
    file.control.value = '';
    if (autoName && name.control.value === autoName) name.control.value = '';
    autoName = '';
    clearMessages();
    describe();
  });
  file.control.addEventListener('change', () => {
    const first = files()[0];
    // a dataset or trace is named after its file unless a name was typed
    if (first && chosen().kind !== 'checkpoint' && (!name.control.value || name.control.value === autoName)) {
      name.control.value = first.name;
      autoName = first.name;
    }
    describe();
  });
  name.control.addEventListener('input', describe);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    clearMessages();
    const list = targets();
    if (!list.length) fieldError(file, chosen().kind === 'checkpoint' ? 'choose the checkpoint\'s files' : 'choose a file');
    if (!name.control.value.trim()) fieldError(name, 'give a name');
    if (!list.length || !name.control.value.trim()) return;
    upload(list, false);
  });
  describe();
  return form;
}
