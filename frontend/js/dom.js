// Tiny DOM helpers: h('tag.class', {attrs}, ...children). Text children are escaped by construction.

export function h(spec, attrs = {}, ...children) {
  const [tag, ...classes] = spec.split('.');
  const el = document.createElement(tag || 'div');
  if (classes.length) el.className = classes.join(' ');
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'text') el.textContent = value;
    else if (key === 'class') el.className = value;
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** A unique id for label/for and aria-describedby pairs. */
let counter = 0;
export function uid(prefix = 'id') {
  counter += 1;
  return `${prefix}-${counter}`;
}

export function statusBadge(status) {
  return h(`span.status.status-${status}`, { 'data-status': status }, status);
}

export function progressBar(done, total) {
  const pct = total > 0 ? Math.min(100, Math.round((100 * done) / total)) : 0;
  const bar = h('span', { style: `width:${pct}%` });
  return h(
    'div.progress',
    { role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': total, 'aria-valuenow': done, 'aria-label': 'rounds done' },
    h('div.progress-bar', {}, bar),
    h('span.small.nowrap', {}, `${done}/${total}`),
  );
}

let toastTimer = null;
/** A short message at the bottom right (errors of actions, confirmations). */
export function toast(message) {
  let el = document.getElementById('toast');
  if (!el) {
    el = h('div.toast', { id: 'toast', role: 'status', 'aria-live': 'polite' });
    document.body.append(el);
  }
  el.textContent = message;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 5000);
}
