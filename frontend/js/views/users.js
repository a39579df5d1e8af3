// Users (admins): the team's accounts — create one with a role, change a role, deactivate (no login,
// sessions ended, tokens revoked; runs kept) — and API tokens: create (the secret is shown once),
// list, revoke. Everyone else is told the page needs the admin role.

import { get, patch, post } from '../api.js';
import { h, clear, toast } from '../dom.js';
import { formatTime } from '../format.js';
import { can, user } from '../session.js';
import { createUserForm } from '../users/user-form.js';
import { createTokenForm, tokenRow } from '../users/tokens.js';

const ROLES = ['viewer', 'operator', 'admin'];

export function mountUsers(main) {
  const page = h('div', { id: 'users-page' });
  main.append(page);
  if (!can('admin')) {
    page.append(h('div.page-head', {}, h('h1', {}, 'Users')),
      h('p.muted', { 'data-role': 'read-only' }, 'Managing users and API tokens needs the admin role.'));
    return { unmount() {} };
  }
  let closed = false;
  let users = [];
  const note = h('p.small.muted', { 'aria-live': 'polite' });
  const userBody = h('tbody');
  const tokenBody = h('tbody');
  const tokenForm = createTokenForm({ onCreated: load });

  page.append(
    h('div.page-head', {}, h('h1', {}, 'Users'), note),
    h('section.panel', { 'aria-labelledby': 'new-user-title' },
      h('h2', { id: 'new-user-title' }, 'New user'), createUserForm({ roles: ROLES, onCreated: load })),
    h('section.panel', { 'aria-labelledby': 'users-title' },
      h('h2', { id: 'users-title' }, 'Team'),
      h('div.table-wrap', {}, h('table', { 'aria-label': 'Users' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Username'), h('th', {}, 'Role'), h('th', {}, 'Status'),
          h('th', {}, 'Created'), h('th', {}, h('span.sr-only', {}, 'Actions')))),
        userBody))),
    h('section.panel', { 'aria-labelledby': 'tokens-title' },
      h('h2', { id: 'tokens-title' }, 'API tokens'),
      h('p.small', {}, 'A token acts as its owner for the CLI and scripts (', h('code', {}, 'Authorization: Bearer …'),
        '). Its secret is shown once, when it is created; revoking it stops it at once.'),
      tokenForm.element,
      h('div.table-wrap', {}, h('table', { 'aria-label': 'API tokens' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Owner'), h('th', {}, 'Created'),
          h('th', {}, 'Last used'), h('th', {}, 'Status'), h('th', {}, h('span.sr-only', {}, 'Actions')))),
        tokenBody))),
  );

  function userRow(u) {
    const self = u.id === user().id;
    const role = h('select', { 'aria-label': `Role of ${u.username}`, disabled: self || !u.active },
      ROLES.map((r) => h('option', { value: r, selected: r === u.role }, r)));
    role.addEventListener('change', async () => {
      role.disabled = true;
      try {
        await patch(`/api/users/${u.id}`, { role: role.value });
        toast(`${u.username} is now ${role.value}.`);
      } catch (error) {
        toast(`Role not changed: ${error.message}`);
      }
      load();
    });
    let action = null;
    if (!self && u.active) {
      action = h('button.btn.btn-small.btn-danger', { type: 'button', 'data-action': 'deactivate', 'aria-label': `Deactivate ${u.username}` }, 'Deactivate');
      action.addEventListener('click', () => confirmDeactivate(u));
    }
    return h('tr', { 'data-user': u.username, 'data-user-id': u.id },
      h('td', {}, u.username, self ? h('span.small.muted', {}, ' (you)') : null),
      h('td', {}, role),
      h('td', { 'data-col': 'status' }, u.active ? 'active' : h('span.muted', {}, 'deactivated')),
      h('td.small.nowrap', { title: u.created_at }, formatTime(u.created_at)),
      h('td', {}, action));
  }

  function confirmDeactivate(u) {
    const yes = h('button.btn.btn-danger', { type: 'button' }, 'Deactivate');
    const no = h('button.btn', { type: 'button' }, 'Keep');
    const dialog = h('dialog', { 'aria-label': `Deactivate ${u.username}` },
      h('h2', {}, `Deactivate ${u.username}?`),
      h('p', {}, 'They are logged out, cannot log in, and their API tokens are revoked. Their runs stay. ',
        'Setting a new password for them (PATCH /api/users/{id}) reactivates them.'),
      h('div.row', {}, yes, no));
    document.body.append(dialog);
    no.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => dialog.remove());
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      try {
        await post(`/api/users/${u.id}/deactivate`);
        toast(`${u.username} is deactivated.`);
      } catch (error) {
        toast(`Not deactivated: ${error.message}`);
      } finally {
        dialog.close();
        load();
      }
    });
    dialog.showModal();
    no.focus();
  }

  async function load() {
    let tokens;
    try {
      [users, tokens] = await Promise.all([get('/api/users'), get('/api/tokens')]);
    } catch (error) {
      note.textContent = `Cannot load users: ${error.message}`;
      return;
    }
    if (closed) return;
    note.textContent = `${users.length} user${users.length === 1 ? '' : 's'}, ${tokens.length} token${tokens.length === 1 ? '' : 's'}`;
    clear(userBody).append(...users.map(userRow));
    tokenForm.setUsers(users);
    const names = new Map(users.map((u) => [u.id, u.username]));
    clear(tokenBody);
    if (!tokens.length) tokenBody.append(h('tr', {}, h('td.empty', { colspan: 6 }, 'No API tokens yet.')));
    for (const t of tokens) tokenBody.append(tokenRow(t, names.get(t.user_id) ?? `#${t.user_id}`, load));
    page.dataset.ready = 'true';
  }

  load();
  return {
    unmount() {
      closed = true;
    },
  };
}
