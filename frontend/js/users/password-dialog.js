// "Change password" from the header, for every signed-in user, and "Choose your password" for a user
// whose password an admin set (the API refuses their session everything else until then):
// POST /api/auth/password with the current and the new password. This session stays signed in, the
// user's other sessions end; "Also revoke my API tokens" revokes every token of theirs.

import { post } from '../api.js';
import { h, uid, toast } from '../dom.js';

export function openPasswordDialog({ onChanged }) {
  const ids = { current: uid('pw-current'), next: uid('pw-new'), again: uid('pw-again'), error: uid('pw-error') };
  const current = h('input', { id: ids.current, type: 'password', autocomplete: 'current-password', required: true });
  const next = h('input', { id: ids.next, type: 'password', autocomplete: 'new-password', required: true, minlength: 8 });
  const again = h('input', { id: ids.again, type: 'password', autocomplete: 'new-password', required: true });
  const revoke = h('input', { id: uid('pw-revoke'), type: 'checkbox' });
  const error = h('p.field-error', { id: ids.error, role: 'alert', hidden: true });
  const save = h('button.btn.btn-primary', { type: 'submit' }, 'Change password');
  const cancel = h('button.btn', { type: 'button' }, 'Cancel');
  const form = h('form.stack', { novalidate: true, 'aria-describedby': ids.error },
    h('h2', {}, 'Change your password'),
    h('div.control', {}, h('label', { for: ids.current }, 'Current password'), current),
    h('div.control', {}, h('label', { for: ids.next }, 'New password'), next,
      h('span.small.muted', {}, 'At least 8 characters; not a common password, not your user name.')),
    h('div.control', {}, h('label', { for: ids.again }, 'New password again'), again),
    h('p.small.muted', {}, 'Your other browser sessions end.'),
    h('div.control.control-inline', {}, revoke, h('label', { for: revoke.id }, 'Also revoke my API tokens')),
    error,
    h('div.row', {}, save, cancel));
  const dialog = h('dialog', { 'aria-label': 'Change your password', id: 'password-dialog' }, form);
  document.body.append(dialog);
  cancel.addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => dialog.remove());
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    if (next.value !== again.value) {
      error.textContent = 'The two new passwords differ.';
      error.hidden = false;
      again.select();
      return;
    }
    save.disabled = true;
    try {
      await post('/api/auth/password', { current_password: current.value, new_password: next.value, revoke_tokens: revoke.checked });
      dialog.close();
      toast('Password changed.');
      onChanged();
    } catch (err) {
      const detail = err.details[0];
      if (detail?.field === 'current_password' && detail.message === 'does not match') {
        error.textContent = 'The current password is wrong.';
      } else {
        error.textContent = detail ? `${detail.field}: ${detail.message}` : err.message;
      }
      error.hidden = false;
    } finally {
      save.disabled = false;
    }
  });
  dialog.showModal();
  current.focus();
}
