// What the server offers for fields that name something on it: its datasets, traces and checkpoints
// (GET /api/files) and the policies a config may use (GET /api/config/policies). A file field gets a
// picker beside it (a select: choosing fills the field) and a datalist for typing; it stays free text
// (a preset may name a file not uploaded yet). The policy is a choice among the server's policies only
// (CHOICE_FIELDS): no import path is typed on the service.

import { get } from '../api.js';
import { h, clear, uid } from '../dom.js';

/** The config fields that name something on the server, and which list suggests their values. */
export const SUGGESTED_FIELDS = {
  'model.pretrained_path': 'checkpoint',
  'data.files.train': 'dataset',
  'data.files.eval': 'dataset',
  'network.trace_file': 'trace',
};

/** The config fields whose value is one of the server's names, chosen from a select (no typing). */
export const CHOICE_FIELDS = {
  'scheduler.policy': 'policy',
};

const NOUNS = { checkpoint: 'checkpoints', dataset: 'datasets', trace: 'traces', policy: 'policies' };

/** One list of names (e.g. the datasets) and every picker showing it. */
export class Suggestions {
  constructor(kind) {
    this.kind = kind;
    this.noun = NOUNS[kind] || kind;
    this.values = [];
    this.loaded = false;
    this.pickers = new Set();
    this.listeners = new Set(); // choice fields re-rendered when the list arrives
    this.datalist = h('datalist', { id: uid(`suggest-${kind}`) });
  }

  /** The picker of ``input`` (labelled after the field), and the datalist once. */
  picker(input, label) {
    input.setAttribute('list', this.datalist.id);
    const select = h('select.picker', { 'aria-label': `${label}: choose from the server's ${this.noun}`, 'data-suggest': this.kind });
    select.addEventListener('change', () => {
      if (!select.value) return;
      input.value = select.value;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      input.dispatchEvent(new Event('change', { bubbles: true })); // a choice, as a typed value left
      select.value = '';
      input.focus();
    });
    this.pickers.add(select);
    this.render(select);
    const first = this.pickers.size === 1;
    return first ? [select, this.datalist] : select;
  }

  set(values) {
    this.values = values;
    this.loaded = true;
    clear(this.datalist).append(...values.map((v) => h('option', { value: v })));
    for (const select of this.pickers) this.render(select);
    for (const listener of this.listeners) listener();
  }

  /** Call ``listener`` whenever the list changes. */
  onChange(listener) {
    this.listeners.add(listener);
  }

  render(select) {
    const count = this.values.length;
    const head = !this.loaded ? 'loading…' : count ? `choose (${count} ${this.noun})` : `no ${this.noun} on the server`;
    clear(select).append(h('option', { value: '' }, head), ...this.values.map((v) => h('option', { value: v }, v)));
    select.disabled = this.loaded && !count;
  }
}

/** A Suggestions per kind, for buildSchemaForm. */
export function createSuggestions() {
  return Object.fromEntries(Object.keys(NOUNS).map((kind) => [kind, new Suggestions(kind)]));
}

/**
 * Fill ``suggestions`` from the server: names of the data directory's files by kind, and the policy
 * names. A list that cannot be read stays empty (the fields still take typed names).
 */
export async function loadSuggestions(suggestions) {
  const [files, policies] = await Promise.all([
    get('/api/files').catch(() => []),
    get('/api/config/policies').catch(() => []),
  ]);
  for (const kind of ['dataset', 'trace', 'checkpoint']) {
    suggestions[kind].set(files.filter((f) => f.kind === kind).map((f) => f.name));
  }
  suggestions.policy.set(policies);
}
