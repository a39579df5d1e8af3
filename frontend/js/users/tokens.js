// API tokens on the users page: the "new token" form (POST /api/tokens; the secret is shown once)
// and a row per token with its Revoke button (DELETE /api/tokens/{id}).

import { del, post } from '../api.js';
import { h, clear, uid, toast } from '../dom.js';
import { formatTime } from '../format.js';

export function createTokenForm({ onCreated }) {
  const ids = { name: uid('token-name'), owner: uid('token-owner'), error: uid('token-error') };
  const name = h('input', { id: ids.name, type: 'text', autocomplete: 'off', required: true, maxlength: 100 });
  const owner = h('select', { id: ids.owner });
  const error = h('p.field-error', { id: ids.error, role: 'alert', hidden: true });
  const secret = h('div', { 'aria-live': 'polite' });
  const submit = h('button.btn.btn-primary', { type: 'submit' }, 'Create token');
  const form = h('form.row', { novalidate: true, 'aria-describedby': ids.error, id: 'new-token-form' },
    h('div.control', {}, h('label', { for: ids.name }, 'Token name'), name),
    h('div.control', {}, h('label', { for: ids.owner }, 'Owner'), owner),
    submit);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const created = await post('/api/tokens', { name: name.value, user_id: Number(owner.value) });
      clear(secret).append(h('div.notice.notice-ok', { id: 'token-secret-notice' },
        h('p', {}, `Token “${created.name}” — copy it now, it is not shown again:`),
        h('code', { id: 'token-secret' }, created.token)));
      name.value = '';
      onCreated();
    } catch (err) {
      error.textContent = err.details.length ? err.details.map((d) => `${d.field}: ${d.message}`).join('; ') : err.message;
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });

  function setUsers(users) {
    const chosen = owner.value;
    clear(owner).append(...users.filter((u) => u.active).map((u) => h('option', { value: u.id }, u.username)));
    if (chosen) owner.value = chosen;
  }

  return { element: h('div', {}, form, error, secret), setUsers };
}

export function tokenRow(token, ownerName, onChanged) {
  let action = null;
  if (!token.revoked_at) {
    action = h('button.btn.btn-small.btn-danger', { type: 'button', 'data-action': 'revoke', 'aria-label': `Revoke ${token.name}` }, 'Revoke');
    action.addEventListener('click', async () => {
      action.disabled = true;
      try {
        await del(`/api/tokens/${token.id}`);
        toast(`Revoked ${token.name}.`);
      } catch (error) {
        toast(`Not revoked: ${error.message}`);
      }
      onChanged();
    });
  }
  const when = (iso) => (iso ? h('span', { title: iso }, formatTime(iso)) : h('span.muted', {}, 'never'));
  return h('tr', { 'data-token': token.name, 'data-token-id': token.id },
    h('td', {}, token.name),
    h('td', {}, ownerName),
    h('td.small.nowrap', {}, when(token.created_at)),
    h('td.small.nowrap', {}, when(token.last_used_at)),
    h('td', { 'data-col': 'status' }, token.revoked_at ? h('span.muted', { title: token.revoked_at }, 'revoked') : 'active'),
    h('td', {}, action));
}
