// The admin's "new user" form: username, initial password and role (POST /api/users).

import { post } from '../api.js';
import { h, uid, toast } from '../dom.js';

export function createUserForm({ roles, onCreated }) {
  const ids = { name: uid('new-user'), pass: uid('new-pass'), role: uid('new-role'), error: uid('new-user-error') };
  const username = h('input', { id: ids.name, type: 'text', autocomplete: 'off', required: true, pattern: '[A-Za-z0-9_.@\\-]{1,64}' });
  const password = h('input', { id: ids.pass, type: 'password', autocomplete: 'new-password', required: true, minlength: 8 });
  const role = h('select', { id: ids.role }, roles.map((r) => h('option', { value: r }, r)));
  const error = h('p.field-error', { id: ids.error, role: 'alert', hidden: true });
  const submit = h('button.btn.btn-primary', { type: 'submit' }, 'Create user');
  const form = h('form.row', { novalidate: true, 'aria-describedby': ids.error, id: 'new-user-form' },
    h('div.control', {}, h('label', { for: ids.name }, 'Username'), username),
    h('div.control', {}, h('label', { for: ids.pass }, 'Initial password'), password),
    h('div.control', {}, h('label', { for: ids.role }, 'Role'), role),
    submit);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const created = await post('/api/users', { username: username.value, password: password.value, role: role.value });
      toast(`Created ${created.username}: they should change the initial password from the header.`);
      form.reset();
      onCreated();
    } catch (err) {
      error.textContent = err.details.length
        ? err.details.map((d) => `${d.field}: ${d.message}`).join('; ')
        : err.message;
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  });
  return h('div', {}, form, error);
}
