// An object property of a config section (a Range, data.tokenizer, data.files): a field per property
// of its own, each built like any other field (numbers, strings, enums, nullable enums, ...), so the
// API's 422 details for "data.files.train" land next to that sub-field.
//
// - all-number objects of up to three properties (a Range: low, high) sit on one line;
// - other objects are a group of fields;
// - a nullable object ("anyOf [X, null]", e.g. data.files) has a "set" checkbox: unset is null,
//   set shows its fields (their defaults the first time).

import { h, uid } from '../dom.js';
import { richText } from './rich-text.js';

const NUMERIC = ['number', 'integer'];

/**
 * ``subWidget(path, name, node)`` builds the widget of one property (schema-form's widgetFor);
 * ``subDefault(node)`` is a property's default.
 */
export function objectField(path, label, spec, nullable, { subWidget, subDefault }) {
  const entries = Object.entries(spec.properties);
  const compact = !nullable && entries.length <= 3
    && entries.every(([, node]) => NUMERIC.includes(node.type));
  const subs = entries.map(([name, node]) => {
    const widget = subWidget(`${path}.${name}`, name, node);
    // the visible label is the property's name; the accessible name says whose (e.g. "tokenizer kind")
    const control = widget.el.querySelector('input, select, textarea');
    if (control) control.setAttribute('aria-label', `${label} ${name}`);
    return { name, widget, fallback: subDefault(node) };
  });
  const labelId = uid('group');
  const group = h(compact ? 'div.field-inline' : 'div.object-fields', { role: 'group', 'aria-labelledby': labelId },
    subs.map((s) => s.widget.el));
  const help = h('span.help', {}, richText(spec.description || ''));
  const toggle = nullable ? h('input', { type: 'checkbox', id: uid('set'), 'data-role': 'set-object' }) : null;
  const el = h(`div.field${compact ? '' : '.field-wide.object-field'}`, { 'data-path': path },
    h('span.label', { id: labelId }, h('strong.small', {}, label)),
    toggle ? h('div.checkbox', {}, toggle, h('label', { for: toggle.id }, `set ${label}`),
      h('span.small.muted', {}, '(unset: none)')) : null,
    help, group, h('p.field-error', { role: 'alert', hidden: true }));
  if (toggle) {
    toggle.setAttribute('aria-describedby', labelId);
    toggle.addEventListener('change', () => { group.hidden = !toggle.checked; });
  }

  function setSubs(value) {
    for (const s of subs) s.widget.set(value && value[s.name] !== undefined ? value[s.name] : s.fallback);
  }

  return {
    el,
    get() {
      if (toggle && !toggle.checked) return null;
      return Object.fromEntries(subs.map((s) => [s.name, s.widget.get()]).filter(([, v]) => v !== undefined));
    },
    set(value) {
      const present = value !== null && value !== undefined;
      if (toggle) {
        toggle.checked = present;
        group.hidden = !present;
      }
      setSubs(present ? value : null);
    },
  };
}
