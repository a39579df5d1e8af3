// Sign in with username and password: POST /api/auth/login sets the HttpOnly session cookie.

import { post } from '../api.js';
import { h, uid } from '../dom.js';
import { setUser } from '../session.js';

export function mountLogin(main, { onLogin }) {
  const userId = uid('login-user');
  const passId = uid('login-pass');
  const errorId = uid('login-error');
  const error = h('p.field-error', { id: errorId, role: 'alert', hidden: true });
  const username = h('input', { id: userId, type: 'text', name: 'username', autocomplete: 'username', required: true });
  const password = h('input', {
    id: passId, type: 'password', name: 'password', autocomplete: 'current-password', required: true,
  });
  const submit = h('button.btn.btn-primary', { type: 'submit' }, 'Log in');
  const form = h(
    'form.panel.stack',
    { novalidate: true, 'aria-describedby': errorId },
    h('h1', {}, h('img', { src: '/favicon.svg', alt: '', width: 28, height: 28 }), 'CollaPipe'),
    h('p.muted', {}, 'Collaborative pipeline-parallel training across edge clusters.'),
    h('div.control', {}, h('label', { for: userId }, 'Username'), username),
    h('div.control', {}, h('label', { for: passId }, 'Password'), password),
    error,
    submit,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const me = await post('/api/auth/login', { username: username.value, password: password.value }, { quietAuth: true });
      setUser(me);
      await onLogin();
    } catch (err) {
      error.textContent = err.status === 401 ? 'Wrong username or password.' : err.message;
      error.hidden = false;
      password.select();
    } finally {
      submit.disabled = false;
    }
  });
  main.append(h('div.login', {}, form));
  username.focus();
  return { unmount() {} };
}
