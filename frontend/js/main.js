// Boot: who is signed in, then a hash router (#/runs, #/runs/12, #/launch, #/compare?ids=1,2, #/data,
// #/studies, #/studies/3, #/users).
// Each view is mount(main, params) -> { unmount() }: unmount closes its streams and charts.

import { post, setUnauthenticatedHandler } from './api.js';
import { h, clear } from './dom.js';
import { can, loadUser, setUser, user } from './session.js';
import './stats.js';
import { mountLogin } from './views/login.js';
import { mountRuns } from './views/runs.js';
import { mountRun } from './views/run.js';
import { mountLaunch } from './views/launch.js';
import { mountCompare } from './views/compare.js';
import { mountData } from './views/data.js';
import { mountUsers } from './views/users.js';
import { mountStudies } from './views/studies.js';
import { mountStudy } from './views/study.js';
import { openPasswordDialog } from './users/password-dialog.js';

const main = document.getElementById('main');
const header = document.getElementById('app-header');
let currentView = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/runs';
  const [path, query = ''] = raw.split('?');
  const parts = path.split('/').filter(Boolean);
  return { parts, query: new URLSearchParams(query) };
}

function route() {
  const { parts, query } = parseHash();
  if (parts[0] === 'runs' && parts[1]) return { nav: 'runs', mount: mountRun, params: { runId: Number(parts[1]), query } };
  if (parts[0] === 'launch') return { nav: 'launch', mount: mountLaunch, params: { query } };
  if (parts[0] === 'compare') return { nav: 'compare', mount: mountCompare, params: { query } };
  if (parts[0] === 'data') return { nav: 'data', mount: mountData, params: { query } };
  if (parts[0] === 'studies' && parts[1]) return { nav: 'studies', mount: mountStudy, params: { studyId: Number(parts[1]), query } };
  if (parts[0] === 'studies') return { nav: 'studies', mount: mountStudies, params: { query } };
  if (parts[0] === 'users') return { nav: 'users', mount: mountUsers, params: { query } };
  return { nav: 'runs', mount: mountRuns, params: { query } };
}

function unmountCurrent() {
  if (currentView && currentView.unmount) {
    try {
      currentView.unmount();
    } catch (error) {
      console.error(error);
    }
  }
  currentView = null;
}

function render() {
  unmountCurrent();
  clear(main);
  if (!user()) {
    header.hidden = true;
    currentView = mountLogin(main, { onLogin: start });
    return;
  }
  if (user().must_change_password) {
    // the API refuses this session everything else until its user chose their own password
    main.append(h('section.panel', { id: 'choose-password' },
      h('h1', {}, 'Choose your password'),
      h('p', {}, 'Your password was set by an administrator. Choose your own to continue.'),
      h('button.btn.btn-primary', { type: 'button', onclick: choosePassword }, 'Choose your password')));
    return;
  }
  const target = route();
  for (const link of header.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === target.nav) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  try {
    currentView = target.mount(main, target.params);
  } catch (error) {
    console.error(error);
    main.append(h('div.panel', {}, h('p.bad', {}, `This page failed to load: ${error.message}`)));
  }
}

function renderHeader() {
  const me = user();
  header.hidden = !me;
  if (!me) return;
  document.getElementById('user-name').textContent = me.username;
  document.getElementById('user-role').textContent = me.role;
  for (const item of header.querySelectorAll('[data-min-role]')) item.hidden = !can(item.dataset.minRole);
  header.querySelector('nav').hidden = me.must_change_password;
}

function choosePassword() {
  openPasswordDialog({
    onChanged() {
      setUser({ ...user(), must_change_password: false });
      renderHeader();
      render();
    },
  });
}

async function start() {
  await loadUser();
  renderHeader();
  render();
}

document.getElementById('change-password').addEventListener('click', choosePassword);

document.getElementById('logout').addEventListener('click', async () => {
  try {
    await post('/api/auth/logout');
  } catch {
    /* already signed out */
  }
  setUser(null);
  renderHeader();
  location.hash = '#/runs';
  render();
});

setUnauthenticatedHandler(() => {
  if (!user()) return;
  setUser(null);
  renderHeader();
  render();
});

window.addEventListener('hashchange', () => {
  render();
  main.focus({ preventScroll: true }); // screen readers and Tab continue in the new page
});
start().catch((error) => {
  main.append(h('div.panel', {}, h('p.bad', {}, `Cannot reach the CollaPipe API: ${error.message}`)));
});
