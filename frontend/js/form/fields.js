// Input widgets for one JSON Schema property each: {el, get(), set(value)}.
// Values typed in a field go to the API as typed when they are not numbers, so the API's own message
// ("Input should be a valid number") comes back for that field: the browser does not second-guess it.
// An empty field is left out of the config (get() answers undefined): the config's default applies,
// which the placeholder shows; a nullable field's empty value is null ("none").

import { h, clear, uid } from '../dom.js';
import { numberForInput } from '../format.js';
import { richText } from './rich-text.js';

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
/** ``box``: what stands in the field for the control (the control and what goes with it). */
export function fieldShell(path, label, control, spec, { wide = false, checkbox = false, box = control } = {}) {
  const id = control.id || uid('f');
  control.id = id;
  const helpId = `${id}-help`;
  const errorId = `${id}-error`;
  control.setAttribute('aria-describedby', `${helpId} ${errorId}`);
  const helpText = [spec.description, bounds(spec)].filter(Boolean).join(' · ');
  const labelEl = h('label', { for: id }, label);
  const body = checkbox ? h('div.checkbox', {}, control, labelEl) : [labelEl, box];
  return h(
    `div.field${wide ? '.field-wide' : ''}`,
    { 'data-path': path },
    body,
    helpText ? h('span.help', { id: helpId }, richText(helpText)) : h('span.help', { id: helpId, hidden: true }),
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
  const el = fieldShell(path, label, input, spec);
  const note = h('span.help.field-note', { hidden: true });
  el.querySelector('.help').after(note);
  let locked = false;
  return {
    el,
    input,
    get() {
      if (locked) return undefined; // the server reads it from elsewhere (a checkpoint's config.json)
      const value = parseNumber(input.value, integer);
      if (value !== '') return value;
      return nullable ? null : undefined;
    },
    set(value) {
      input.value = numberForInput(value);
    },
    /** Show ``value`` read-only with ``why``, and leave the field out of the config; unlock(): editable. */
    lock(value, why) {
      locked = true;
      input.value = numberForInput(value);
      input.readOnly = true;
      el.classList.add('field-locked');
      note.textContent = why;
      note.hidden = false;
    },
    unlock() {
      if (!locked) return;
      locked = false;
      input.readOnly = false;
      el.classList.remove('field-locked');
      note.hidden = true;
    },
  };
}

/**
 * A string. With ``suggest`` (a Suggestions picker, form/suggestions.js), a select beside the input
 * offers what the server has (its datasets, checkpoints, traces or policies): choosing one fills the
 * input, which stays free to type in.
 */
export function textField(path, label, spec, nullable, { suggest } = {}) {
  const input = h('input', { type: 'text', name: path, autocomplete: 'off', placeholder: nullable ? 'none' : (spec.default ?? '') });
  const box = suggest ? h('div.with-picker', {}, input, suggest.picker(input, label)) : input;
  return {
    el: fieldShell(path, label, input, spec, { box }),
    input,
    get() {
      if (input.value !== '') return input.value;
      return nullable ? null : undefined;
    },
    set(value) {
      input.value = value ?? '';
    },
  };
}

/**
 * One of the names the server lists (``choices``, a Suggestions: e.g. its policies) as a select. A
 * value the server does not list (a config written elsewhere) stays selected, marked as such, so the
 * API refuses it with its own message instead of the form silently picking another.
 */
export function choiceField(path, label, spec, choices) {
  const select = h('select', { name: path, 'data-choices': choices.kind });
  let wanted = spec.default ?? '';
  function render() {
    const options = choices.values.map((v) => h('option', { value: v }, v));
    if (wanted !== '' && !choices.values.includes(wanted)) {
      const note = choices.loaded ? ' (not on this server)' : '';
      options.unshift(h('option', { value: wanted }, `${wanted}${note}`));
    }
    clear(select).append(...options);
    select.value = wanted;
  }
  select.addEventListener('change', () => {
    wanted = select.value;
  });
  choices.onChange(render);
  render();
  return {
    el: fieldShell(path, label, select, spec),
    get: () => wanted,
    set(value) {
      wanted = value ?? spec.default ?? '';
      render();
    },
  };
}

/** An enum as a select; a nullable enum has a first choice "none" that stands for null. */
export function selectField(path, label, spec, nullable = false) {
  const options = spec.enum.map((v) => h('option', { value: v }, v));
  if (nullable) options.unshift(h('option', { value: '' }, 'none'));
  const select = h('select', { name: path }, options);
  return {
    el: fieldShell(path, label, select, spec),
    input: select,
    get: () => (nullable && select.value === '' ? null : select.value),
    set(value) {
      if (value === null && nullable) select.value = '';
      else select.value = value ?? spec.default ?? (nullable ? '' : spec.enum[0]);
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
  const shown = Array.isArray(spec.default) ? `${spec.default.join(', ')} (comma-separated)` : 'comma-separated';
  const input = h('input', { type: 'text', name: path, autocomplete: 'off', placeholder: nullable ? 'none (comma-separated)' : shown });
  return {
    el: fieldShell(path, label, input, spec),
    get() {
      const text = input.value.trim();
      if (text === '') return nullable ? null : undefined;
      return text.split(',').map((part) => (itemType === 'integer' || itemType === 'number'
        ? parseNumber(part, itemType === 'integer')
        : part.trim()));
    },
    set(value) {
      input.value = Array.isArray(value) ? value.join(', ') : '';
    },
  };
}

/**
 * An object of free keys (a JSON Schema object without properties, e.g. model.hf_config), typed as
 * JSON. Empty means {} (null when nullable). Text that is not JSON goes to the API as typed, so the
 * API's own message ("Input should be a valid dictionary") comes back next to the field.
 */
export function jsonField(path, label, spec, nullable) {
  const textarea = h('textarea.json-input', {
    name: path, rows: 2, spellcheck: 'false', autocomplete: 'off', placeholder: nullable ? 'none' : '{}',
  });
  return {
    el: fieldShell(path, label, textarea, { ...spec, description: [spec.description, 'a JSON object'].filter(Boolean).join(' · ') }, { wide: true }),
    input: textarea,
    get() {
      const text = textarea.value.trim();
      if (text === '') return nullable ? null : {};
      try {
        return JSON.parse(text);
      } catch {
        return textarea.value;
      }
    },
    set(value) {
      const empty = value === null || value === undefined || (typeof value === 'object' && !Object.keys(value).length);
      if (empty) textarea.value = '';
      else if (typeof value === 'string') textarea.value = value;
      else textarea.value = jsonText(value);
    },
  };
}

/** A small flat object on one line ({"rope_theta": 10000}); anything bigger indented. */
function jsonText(value) {
  const entries = Array.isArray(value) ? [] : Object.entries(value);
  const flat = entries.length && entries.length <= 4 && entries.every(([, v]) => v === null || typeof v !== 'object');
  if (!flat) return JSON.stringify(value, null, 1);
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(', ')}}`;
}
