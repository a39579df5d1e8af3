// Launch: the config form generated from the JSON Schema, presets, the API's validation errors next
// to their fields, a pre-flight of round 0, then POST /api/runs. A preset is shown as the API reads
// it (POST /api/config/validate fills what it leaves out: defaults, the kind of an architecture);
// fields naming files or policies suggest what the server has (GET /api/files, /api/config/policies).

import { get, post } from '../api.js';
import { h, clear, uid } from '../dom.js';
import { can } from '../session.js';
import { buildSchemaForm } from '../form/schema-form.js';
import { clearErrors, showErrors } from '../form/errors.js';
import { loadSuggestions } from '../form/suggestions.js';
import { createPreflight } from '../launch/preflight.js';

// config errors name config.<path>; the run's own fields (name) keep body.<field>
const PREFIXES = ['config.', 'body.config.'];
let schemaCache = null;
let presetIndex = null;

export function mountLaunch(main) {
  if (!can('operator')) {
    main.append(h('div.panel', {}, h('h1', {}, 'Launch a run'),
      h('p', {}, 'Launching runs needs the operator role. Ask an administrator for it.')));
    return { unmount() {} };
  }
  let closed = false;
  let preflight = null;
  const presetId = uid('preset');
  const nameId = uid('run-name');
  const presetSelect = h('select', { id: presetId }, h('option', { value: '' }, 'schema defaults'));
  const runName = h('input', { id: nameId, type: 'text', placeholder: 'default: the config\'s name', maxlength: 200 });
  const summary = h('div.error-summary', { role: 'alert', hidden: true, tabindex: '-1' });
  const status = h('div', { 'aria-live': 'polite' });
  const checkButton = h('button.btn', { type: 'button' }, 'Check & pre-flight');
  const launchButton = h('button.btn.btn-primary', { type: 'submit' }, 'Launch');
  const formSlot = h('div', {}, h('p.muted', {}, 'Loading the config schema…'));
  const side = h('aside.panel.launch-side', { 'aria-label': 'Pre-flight', id: 'preflight' });
  const form = h('form', { novalidate: true, 'aria-label': 'Experiment config' },
    h('div.panel', {},
      h('div.form-toolbar', {},
        h('div.control', {}, h('label', { for: presetId }, 'Preset'), presetSelect),
        h('div.control.field', { style: 'flex:1; min-width: 200px', 'data-path': 'body.name' },
          h('label', { for: nameId }, 'Run name'), runName, h('p.field-error', { role: 'alert', hidden: true })))),
    summary, formSlot,
    h('div.panel.row', {}, checkButton, launchButton, status));

  main.append(
    h('div.page-head', {}, h('h1', {}, 'Launch a run'), h('div.spacer'),
      h('span.muted.small', {}, 'Fields follow the config schema; units are in the field names.')),
    h('div.launch-layout', {}, form, side),
  );
  preflight = createPreflight(side);
  let schemaForm = null;

  let presetLoads = 0;

  /**
   * Show preset ``id`` (or the schema's defaults): first as written, then as the API reads it —
   * unless the user has typed in the form meanwhile. A preset the API refuses keeps its errors shown.
   */
  async function loadPreset(id) {
    const load = ++presetLoads;
    delete form.dataset.presetLoaded; // set again once the preset is shown as the API reads it
    const entry = presetIndex.find((p) => p.id === id);
    const config = entry ? await get(`/presets/${entry.file}`) : {};
    if (closed || load !== presetLoads) return;
    schemaForm.set(config);
    clearErrors(form, summary);
    preflight.reset('Preset loaded. Check it to see the first round per device.');
    const asSet = JSON.stringify(schemaForm.get());
    status.textContent = 'Reading the preset as the server does…';
    try {
      const normalized = await post('/api/config/validate', config);
      if (closed || load !== presetLoads) return;
      if (JSON.stringify(schemaForm.get()) === asSet) schemaForm.set(normalized);
      status.textContent = '';
    } catch (error) {
      if (closed || load !== presetLoads) return;
      status.textContent = '';
      showErrors(form, summary, error, { prefixes: PREFIXES });
    }
    form.dataset.presetLoaded = id || 'defaults';
  }

  async function init() {
    try {
      [schemaCache, presetIndex] = await Promise.all([
        schemaCache || get('/api/config/schema'),
        presetIndex || get('/presets/index.json'),
      ]);
    } catch (error) {
      clear(formSlot).append(h('p.bad', {}, `Cannot load the config schema: ${error.message}`));
      return;
    }
    if (closed) return;
    for (const p of presetIndex) presetSelect.append(h('option', { value: p.id }, p.label));
    schemaForm = buildSchemaForm(schemaCache);
    clear(formSlot).append(schemaForm.element);
    presetSelect.value = 'quickstart';
    await Promise.all([loadPreset('quickstart'), loadSuggestions(schemaForm.suggestions)]);
    if (!closed) form.dataset.ready = 'true';
  }

  presetSelect.addEventListener('change', () => loadPreset(presetSelect.value));

  async function validate() {
    clearErrors(form, summary);
    const config = schemaForm.get();
    try {
      await post('/api/config/validate', config);
      return config;
    } catch (error) {
      showErrors(form, summary, error, { prefixes: PREFIXES });
      summary.focus();
      return null;
    }
  }

  checkButton.addEventListener('click', async () => {
    if (!schemaForm) return;
    checkButton.disabled = true;
    status.textContent = 'Checking…';
    const config = await validate();
    status.textContent = config ? 'The config is valid.' : '';
    if (config) await preflight.run(config);
    checkButton.disabled = false;
  });

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!schemaForm) return;
    clearErrors(form, summary);
    launchButton.disabled = true;
    status.textContent = 'Launching…';
    const body = { config: schemaForm.get() };
    if (runName.value.trim()) body.name = runName.value.trim();
    try {
      const run = await post('/api/runs', body);
      location.hash = `#/runs/${run.id}`;
    } catch (error) {
      status.textContent = '';
      showErrors(form, summary, error, { prefixes: PREFIXES });
      summary.focus();
    } finally {
      launchButton.disabled = false;
    }
  });

  init();
  return {
    unmount() {
      closed = true;
      if (preflight) preflight.destroy();
    },
  };
}
