// The API's 422 details ({field: "config.training.rounds", value, message}) shown next to their fields.
// A field is any element with data-path="training.rounds" holding a .field-error; a detail whose path has
// no field of its own goes to the closest parent that has one, and every detail is listed in the summary.

import { h, clear } from '../dom.js';

export function clearErrors(form, summary) {
  for (const el of form.querySelectorAll('.field-error')) {
    el.hidden = true;
    el.textContent = '';
  }
  for (const el of form.querySelectorAll('[aria-invalid="true"]')) el.removeAttribute('aria-invalid');
  if (summary) {
    summary.hidden = true;
    clear(summary);
  }
}

function stripPrefix(field, prefixes) {
  for (const prefix of prefixes) {
    if (field.startsWith(prefix)) return field.slice(prefix.length);
  }
  return field;
}

function cssPath(path) {
  return path.replace(/["\\]/g, '\\$&');
}

/** The element for ``path`` or its nearest ancestor path; returns [element, remaining sub-path]. */
function findField(form, path) {
  const parts = path.split('.');
  for (let n = parts.length; n > 0; n -= 1) {
    const el = form.querySelector(`[data-path="${cssPath(parts.slice(0, n).join('.'))}"]`);
    if (el) return [el, parts.slice(n).join('.')];
  }
  return [null, path];
}

function errorSlot(el) {
  for (const child of el.children) {
    if (child.classList.contains('field-error')) return child;
  }
  return el.querySelector('.field-error');
}

/**
 * Show ``error`` (an ApiError) in ``form``: each detail next to its field, all of them in ``summary``.
 * Returns the number of details placed next to a field.
 */
export function showErrors(form, summary, error, { prefixes = ['config.', 'body.config.', 'body.'] } = {}) {
  clearErrors(form, summary);
  const details = error.details || [];
  const items = [];
  let placed = 0;
  let first = null;
  for (const detail of details) {
    const path = stripPrefix(String(detail.field || ''), prefixes);
    const [el, rest] = findField(form, path);
    const message = rest ? `${rest}: ${detail.message}` : detail.message;
    if (el) {
      const slot = errorSlot(el);
      if (slot) {
        slot.textContent = slot.textContent ? `${slot.textContent} · ${message}` : message;
        slot.hidden = false;
        placed += 1;
      }
      const input = el.querySelector('input, select, textarea');
      if (input) {
        input.setAttribute('aria-invalid', 'true');
        first = first || input;
      }
    }
    items.push({ path: path || '(config)', message: detail.message, input: el && el.querySelector('input, select, textarea') });
  }
  if (summary) {
    const heading = details.length
      ? `${error.message} — fix ${details.length === 1 ? 'this field' : 'these fields'}:`
      : error.message;
    summary.append(h('strong', {}, heading));
    if (items.length) {
      const list = h('ul');
      for (const item of items) {
        const name = item.input
          ? h('button.btn-link', { type: 'button', onclick: () => item.input.focus() }, item.path)
          : h('code', {}, item.path);
        list.append(h('li', {}, name, ': ', item.message));
      }
      summary.append(list);
    }
    summary.hidden = false;
  }
  if (first) {
    const section = first.closest('fieldset.section');
    if (section && section.expand) section.expand();
  }
  return placed;
}
