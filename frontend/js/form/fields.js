// Input widgets for one JSON Schema property each: {el, get(), set(value)}.
// Values typed in a field go to the API as typed when they are not numbers, so the API's own message
// ("Input should be a valid number") comes back for that field: the browser does not second-guess it.

import { h, uid } from '../dom.js';
import { numberForInput } from '../format.js';

/** Parse a typed number; text that is not a number is returned unchanged for the API to refuse. */
export function parseNumber(text, integer) {
  const trimmed = text.trim();
  if (trimmed === '') return '';
  const value = Number(trimmed);
  if (!Number.isFinite(value)) return trimmed;
  if (integer && Number.isInteger(value)) return value;
  return value;
}

function bounds(spec) {
  const parts = [];
  if (spec.minimum !== undefined) parts.push(`≥ ${spec.minimum}`);
  if (spec.exclusiveMinimum !== undefined) parts.push(`> ${spec.exclusiveMinimum}`);
  if (spec.maximum !== undefined) parts.push(`≤ ${spec.maximum}`);
  if (spec.exclusiveMaximum !== undefined) parts.push(`< ${spec.exclusiveMaximum}`);
  return parts.join(', ');
}

/** The wrapper every field shares: label, control, help (description and bounds), error slot. */
export function fieldShell(path, label, control, spec, { wide = false, checkbox = false } = {}) {
  const id = control.id || uid('f');
  control.id = id;
  const helpId = `${id}-help`;
  const errorId = `${id}-error`;
  control.setAttribute('aria-describedby', `${helpId} ${errorId}`);
  const helpText = [spec.description, bounds(spec)].filter(Boolean).join(' · ');
  const labelEl = h('label', { for: id }, label);
  const body = checkbox ? h('div.checkbox', {}, control, labelEl) : [labelEl, control];
  return h(
    `div.field${wide ? '.field-wide' : ''}`,
    { 'data-path': path },
    body,
    helpText ? h('span.help', { id: helpId }, helpText) : h('span.help', { id: helpId, hidden: true }),
    h('p.field-error', { id: errorId, role: 'alert', hidden: true }),
  );
}

export function numberField(path, label, spec, nullable) {
  const integer = spec.type === 'integer';
  const input = h('input', {
    type: 'text',
    inputmode: integer ? 'numeric' : 'decimal',
    name: path,
    autocomplete: 'off',
    placeholder: nullable ? 'none' : numberForInput(spec.default),
  });
  return {
    el: fieldShell(path, label, input, spec),
    get() {
      const value = parseNumber(input.value, integer);
      return value === '' && nullable ? null : value;
    },
    set(value) {
      input.value = numberForInput(value);
    },
  };
}

export function textField(path, label, spec, nullable, { list } = {}) {
  const input = h('input', { type: 'text', name: path, autocomplete: 'off', list, placeholder: nullable ? 'none' : '' });
  return {
    el: fieldShell(path, label, input, spec),
    get() {
      return input.value === '' && nullable ? null : input.value;
    },
    set(value) {
      input.value = value ?? '';
    },
  };
}

export function selectField(path, label, spec) {
  const select = h('select', { name: path }, spec.enum.map((v) => h('option', { value: v }, v)));
  return {
    el: fieldShell(path, label, select, spec),
    get: () => select.value,
    set(value) {
      select.value = value ?? spec.default ?? spec.enum[0];
    },
  };
}

export function checkboxField(path, label, spec) {
  const input = h('input', { type: 'checkbox', name: path });
  return {
    el: fieldShell(path, label, input, spec, { checkbox: true }),
    get: () => input.checked,
    set(value) {
      input.checked = Boolean(value);
    },
  };
}

/** An array of strings or integers typed comma-separated ("de, fr, es" or "1,2,1,0"). */
export function listField(path, label, spec, nullable) {
  const itemType = spec.items?.type;
  const input = h('input', { type: 'text', name: path, autocomplete: 'off', placeholder: nullable ? 'none (comma-separated)' : 'comma-separated' });
  return {
    el: fieldShell(path, label, input, spec),
    get() {
      const text = input.value.trim();
      if (text === '') return nullable ? null : [];
      return text.split(',').map((part) => (itemType === 'integer' || itemType === 'number'
        ? parseNumber(part, itemType === 'integer')
        : part.trim()));
    },
    set(value) {
      input.value = Array.isArray(value) ? value.join(', ') : '';
    },
  };
}

/** A small object of numbers on one line (a Range: low and high). */
export function inlineObjectField(path, label, spec) {
  const subs = [];
  const group = h('div.field-inline', { role: 'group', 'aria-label': label });
  for (const [name, sub] of Object.entries(spec.properties)) {
    const id = uid('f');
    const input = h('input', {
      id, type: 'text', inputmode: 'decimal', name: `${path}.${name}`, autocomplete: 'off',
      'aria-label': `${label} ${name}`,
    });
    subs.push({ name, input, integer: sub.type === 'integer' });
    group.append(h('div.sub', { 'data-path': `${path}.${name}` }, h('label', { for: id }, name), input,
      h('p.field-error', { role: 'alert', hidden: true })));
  }
  const el = h('div.field', { 'data-path': path }, h('span.label', { id: uid('lbl') }, h('strong.small', {}, label)), group,
    h('span.help', {}, spec.description || ''), h('p.field-error', { role: 'alert', hidden: true }));
  return {
    el,
    get() {
      const value = {};
      for (const s of subs) value[s.name] = parseNumber(s.input.value, s.integer);
      return value;
    },
    set(value) {
      for (const s of subs) s.input.value = numberForInput(value?.[s.name]);
    },
  };
}
