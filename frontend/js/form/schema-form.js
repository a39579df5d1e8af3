// The launch form, generated from the experiment config's JSON Schema (GET /api/config/schema):
// one collapsible section per config section, one field per property, defaults from the schema.
// Every field carries data-path="section.field" so the API's 422 details land next to it.

import { h, uid } from '../dom.js';
import { checkboxField, choiceField, jsonField, listField, numberField, selectField, textField } from './fields.js';
import { objectField } from './object-field.js';
import { richText } from './rich-text.js';
import { CHOICE_FIELDS, SUGGESTED_FIELDS, createSuggestions } from './suggestions.js';
import { tableField } from './table-field.js';

export const SECTIONS = ['network', 'channel', 'model', 'data', 'training', 'scheduler'];
const TOP_LEVEL = ['name', 'seed', 'executor'];
const SECTION_HINTS = {
  experiment: 'name, seed, executor',
  network: 'clusters, devices and their links',
  channel: 'wireless channel model',
  model: 'builtin or Hugging Face Transformer, split into blocks',
  data: 'dataset or your files, tokenizer, split',
  training: 'rounds, micro-batches, optimizer',
  scheduler: 'policy, V, λ, micro-batches',
};

function resolver(schema) {
  const defs = schema.$defs || schema.definitions || {};
  return function resolve(node) {
    if (node && node.$ref) {
      const name = node.$ref.split('/').pop();
      const { $ref, ...rest } = node;
      return { ...resolve(defs[name]), ...rest };
    }
    return node || {};
  };
}

/** {spec, nullable}: "anyOf [X, {type: null}]" unwrapped to X. */
function unwrapNullable(node, resolve) {
  if (Array.isArray(node.anyOf)) {
    const options = node.anyOf.map(resolve);
    const nonNull = options.filter((o) => o.type !== 'null');
    if (nonNull.length === 1) {
      const { anyOf, ...rest } = node;
      return { spec: { ...nonNull[0], ...rest }, nullable: nonNull.length < options.length };
    }
  }
  return { spec: resolve(node), nullable: false };
}

function widgetFor(path, name, node, resolve, suggestions) {
  const { spec, nullable } = unwrapNullable(node, resolve);
  if (Array.isArray(spec.enum)) return selectField(path, name, spec, nullable);
  if (spec.type === 'boolean') return checkboxField(path, name, spec);
  if (spec.type === 'integer' || spec.type === 'number') return numberField(path, name, spec, nullable);
  if (spec.type === 'array') {
    const items = resolve(spec.items || {});
    if (items.type === 'object' && items.properties) return tableField(path, name, spec, items, nullable);
    return listField(path, name, spec, nullable);
  }
  if (spec.type === 'object' && spec.properties) {
    return objectField(path, name, spec, nullable, {
      subWidget: (subPath, subName, subNode) => widgetFor(subPath, subName, subNode, resolve, suggestions),
      subDefault: (subNode) => defaultsOf(unwrapNullable(subNode, resolve).spec, resolve),
    });
  }
  if (spec.type === 'object') return jsonField(path, name, spec, nullable); // free keys (model.hf_config)
  if (CHOICE_FIELDS[path]) return choiceField(path, name, spec, suggestions[CHOICE_FIELDS[path]]);
  return textField(path, name, spec, nullable, { suggest: suggestions[SUGGESTED_FIELDS[path]] });
}

function section(key, title, description) {
  const bodyId = uid('section');
  const toggle = h('button.section-toggle', { type: 'button', 'aria-expanded': 'true', 'aria-controls': bodyId },
    h('span', {}, title, ' ', h('span.hint', {}, SECTION_HINTS[key] || '')));
  const body = h('div.section-body', { id: bodyId });
  const fieldset = h('fieldset.section', { 'data-path': key === 'experiment' ? '' : key, 'data-section': key },
    h('legend', {}, toggle), body, h('p.field-error', { role: 'alert', hidden: true, style: 'padding: 0 16px 12px' }));
  if (description) body.append(h('p.small.muted.field-wide.section-description', { style: 'margin:0' }, richText(description)));
  const setOpen = (open) => {
    toggle.setAttribute('aria-expanded', String(open));
    body.hidden = !open;
  };
  toggle.addEventListener('click', () => setOpen(body.hidden));
  fieldset.expand = () => setOpen(true);
  fieldset.collapse = () => setOpen(false);
  return { fieldset, body };
}

function defaultsOf(spec, resolve) {
  if (spec.default !== undefined) return spec.default;
  if (spec.type === 'object' && spec.properties) {
    return Object.fromEntries(Object.entries(spec.properties).map(([k, v]) => [k, defaultsOf(resolve(v), resolve)]));
  }
  return undefined;
}

/**
 * Build the form; returns {element, get() -> config, set(config), sections, widgets, suggestions}:
 * ``suggestions`` (form/suggestions.js) are empty until the caller fills them from the server.
 * ``labels``: a label for a field other than its name ({name: 'Run name'}); ``help``: a help text
 * shown before the schema's description of that field.
 */
export function buildSchemaForm(schema, { labels = {}, help = {} } = {}) {
  const resolve = resolver(schema);
  const suggestions = createSuggestions();
  const widgets = new Map(); // path -> widget
  const element = h('div.schema-form');
  const sections = {};
  const defaults = {};

  const top = section('experiment', 'Experiment', schema.description);
  for (const name of TOP_LEVEL) {
    const node = schema.properties[name];
    if (!node) continue;
    const described = help[name] ? { ...node, description: [help[name], node.description].filter(Boolean).join(' · ') } : node;
    const widget = widgetFor(name, labels[name] || name, described, resolve, suggestions);
    widgets.set(name, widget);
    defaults[name] = resolve(node).default;
    top.body.append(widget.el);
  }
  sections.experiment = top.fieldset;
  element.append(top.fieldset);

  for (const key of SECTIONS) {
    const node = resolve(schema.properties[key]);
    if (!node.properties) continue;
    const part = section(key, key, node.description);
    defaults[key] = {};
    for (const [name, prop] of Object.entries(node.properties)) {
      const path = `${key}.${name}`;
      const widget = widgetFor(path, name, prop, resolve, suggestions);
      widgets.set(path, widget);
      defaults[key][name] = defaultsOf(unwrapNullable(prop, resolve).spec, resolve);
      part.body.append(widget.el);
    }
    sections[key] = part.fieldset;
    element.append(part.fieldset);
  }

  /** The config the fields hold; a field left empty is left out (its default applies). */
  function get() {
    const config = {};
    for (const [path, widget] of widgets) {
      const value = widget.get();
      const parts = path.split('.');
      let node = config;
      for (const part of parts.slice(0, -1)) node = node[part] = node[part] || {};
      if (value !== undefined) node[parts[parts.length - 1]] = value;
    }
    return config;
  }

  function set(config) {
    for (const [path, widget] of widgets) {
      const parts = path.split('.');
      let value = config;
      let fallback = defaults;
      for (const part of parts) {
        value = value === undefined || value === null ? undefined : value[part];
        fallback = fallback === undefined || fallback === null ? undefined : fallback[part];
      }
      widget.set(value === undefined ? fallback : value);
    }
  }

  set({});
  return { element, get, set, sections, widgets, suggestions };
}
