// Data: the server's data directory — datasets, traces and checkpoints a config may name — with each
// folder's purpose and the config field that names its files. Everyone signed in sees the list
// (GET /api/files); operators upload (PUT /api/files/{name}); admins delete (DELETE, after a
// confirmation).

import { del, get } from '../api.js';
import { h, clear, toast } from '../dom.js';
import { formatTime, formatValue } from '../format.js';
import { can } from '../session.js';
import { FOLDERS } from '../data/folders.js';
import { createUploadForm, fileUrl } from '../data/upload.js';

export function mountData(main) {
  let closed = false;
  const sections = new Map(); // kind -> tbody
  const note = h('p.small.muted', { 'aria-live': 'polite' });
  const page = h('div', { id: 'data-page' });
  main.append(page);

  page.append(
    h('div.page-head', {}, h('h1', {}, 'Data'), note),
    h('p.muted.data-intro', {}, 'A config reads files only from the server\'s data directory, by the names listed here. ',
      'Runs that name a file read it when they start (and when they resume); replacing or deleting it affects those runs.'),
  );
  if (can('operator')) page.append(h('section.panel', { id: 'upload' }, createUploadForm({ onUploaded: load })));
  else page.append(h('p.small.muted', { 'data-role': 'read-only' }, 'Uploading files needs the operator role; deleting them the admin role.'));

  for (const f of FOLDERS) {
    const tbody = h('tbody');
    sections.set(f.kind, tbody);
    page.append(h('section.panel.data-folder', { 'data-folder': f.folder, 'aria-labelledby': `folder-${f.folder}` },
      h('h2', { id: `folder-${f.folder}` }, f.title, ' ', h('code.small.muted', {}, `${f.folder}/`)),
      h('p.small', {}, f.what()),
      h('p.small', {}, 'Named by ', f.field(), '.'),
      h('div.table-wrap', {}, h('table', { 'aria-label': f.title },
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th.num', {}, 'Size'), h('th', {}, 'Modified'), h('th', {}, 'Uploaded by'),
          f.kind === 'checkpoint' ? h('th', {}, 'Files') : null, can('admin') ? h('th', {}, h('span.sr-only', {}, 'Actions')) : null)),
        tbody))));
  }

  function row(file) {
    const remove = can('admin')
      ? h('button.btn.btn-small.btn-danger', { type: 'button', 'aria-label': `Delete ${file.name}`, 'data-action': 'delete' }, 'Delete')
      : null;
    if (remove) remove.addEventListener('click', () => confirmDelete(file));
    return h('tr', { 'data-name': file.name, 'data-size-bytes': file.size_bytes },
      h('td', {}, h('code', {}, file.name)),
      h('td.num.nowrap', { title: `${file.size_bytes.toLocaleString()} bytes`, 'data-col': 'size' }, formatValue(file.size_bytes, 'bytes')),
      h('td.small.nowrap', { title: file.modified_at }, formatTime(file.modified_at)),
      // only the uploader (or an admin) may replace a file; none: placed on the server by other means
      h('td.small', { 'data-col': 'uploaded-by' }, file.uploaded_by ?? h('span.muted', {}, '—')),
      file.kind === 'checkpoint' ? h('td.small', {}, (file.files || []).map((n, i) => [i ? ', ' : '', h('code', {}, n)]),
        file.complete === false ? h('span.muted', {}, ' — incomplete: no config.json yet') : null) : null,
      remove ? h('td', {}, remove) : null);
  }

  async function load() {
    let files;
    try {
      files = await get('/api/files');
    } catch (error) {
      note.textContent = `Cannot list the data directory: ${error.message}`;
      return;
    }
    if (closed) return;
    note.textContent = `${files.length} file${files.length === 1 ? '' : 's'}`;
    for (const f of FOLDERS) {
      const tbody = clear(sections.get(f.kind));
      const mine = files.filter((file) => file.kind === f.kind);
      const columns = 4 + (f.kind === 'checkpoint' ? 1 : 0) + (can('admin') ? 1 : 0);
      if (!mine.length) tbody.append(h('tr', {}, h('td.empty', { colspan: columns }, `No ${f.folder} yet.`)));
      for (const file of mine) tbody.append(row(file));
    }
    page.dataset.ready = 'true';
  }

  function confirmDelete(file) {
    const yes = h('button.btn.btn-danger', { type: 'button' }, 'Delete');
    const no = h('button.btn', { type: 'button' }, 'Keep it');
    const dialog = h('dialog', { 'aria-label': `Delete ${file.name}` },
      h('h2', {}, `Delete ${file.name}?`),
      h('p', {}, file.kind === 'checkpoint' ? `The whole checkpoint (${(file.files || []).length} files) is removed. ` : '',
        'Runs whose config names it cannot start or resume until it is uploaded again.'),
      h('div.row', {}, yes, no));
    document.body.append(dialog);
    no.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => dialog.remove());
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      try {
        await del(fileUrl(file.name));
        toast(`Deleted ${file.name}.`);
        load();
      } catch (error) {
        toast(`Not deleted: ${error.message}`);
      } finally {
        dialog.close();
      }
    });
    dialog.showModal();
    no.focus();
  }

  load();
  return {
    unmount() {
      closed = true;
    },
  };
}
