// Launch: the config form generated from the JSON Schema, presets, the API's validation errors next
// to their fields, a pre-flight of round 0, then POST /api/runs. A preset is shown as the API reads
// it (POST /api/config/validate fills what it leaves out: defaults, the kind of an architecture);
// fields naming files or policies suggest what the server has (GET /api/files, /api/config/policies).
// The config's ``name`` is the run's name. The model section follows a chosen checkpoint and
// architecture (launch/model-fields.js); the data section shows what the data hold
// (launch/dataset-size.js). ``#/launch?preset=ID`` opens a preset.

import { get, post } from '../api.js';
import { h, clear, uid } from '../dom.js';
import { can } from '../session.js';
import { buildSchemaForm } from '../form/schema-form.js';
import { clearErrors, showErrors } from '../form/errors.js';
import { loadSuggestions } from '../form/suggestions.js';
import { createDatasetSize } from '../launch/dataset-size.js';
import { followModel } from '../launch/model-fields.js';
import { createPreflight } from '../launch/preflight.js';

// config errors name config.<path>
const PREFIXES = ['config.', 'body.config.'];
const FIRST_PRESET = 'quickstart';
let schemaCache = null;
let presetIndex = null;

export function mountLaunch(main, { query } = {}) {
  if (!can('operator')) {
    main.append(h('div.panel', {}, h('h1', {}, 'Launch a run'),
      h('p', {}, 'Launching runs needs the operator role. Ask an administrator for it.')));
    return { unmount() {} };
  }
  let closed = false;
  let preflight = null;
  let model = null;
  let datasetSize = null;
  const presetId = uid('preset');
  const presetSelect = h('select', { id: presetId }, h('option', { value: '' }, 'schema defaults'));
  const summary = h('div.error-summary', { role: 'alert', hidden: true, tabindex: '-1' });
  const status = h('div', { 'aria-live': 'polite' });
  const checkButton = h('button.btn', { type: 'button' }, 'Check & pre-flight');
  const launchButton = h('button.btn.btn-primary', { type: 'submit' }, 'Launch');
  const formSlot = h('div', {}, h('p.muted', {}, 'Loading the config schema…'));
  const side = h('aside.panel.launch-side', { 'aria-label': 'Pre-flight', id: 'preflight' });
  const form = h('form', { novalidate: true, 'aria-label': 'Experiment config' },
    h('div.panel', {},
      h('div.form-toolbar', {},
        h('div.control', {}, h('label', { for: presetId }, 'Preset'), presetSelect))),
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
    await model.refresh();
    if (closed || load !== presetLoads) return;
    datasetSize.reset();
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
    schemaForm = buildSchemaForm(schemaCache, {
      labels: { name: 'Run name' },
      help: { name: 'the run\'s name in the runs list, and its config\'s' },
    });
    clear(formSlot).append(schemaForm.element);
    model = followModel(schemaForm);
    datasetSize = createDatasetSize(schemaForm);
    const asked = query?.get('preset');
    const first = presetIndex.some((p) => p.id === asked) ? asked : FIRST_PRESET;
    presetSelect.value = first;
    await Promise.all([loadPreset(first), loadSuggestions(schemaForm.suggestions)]);
    if (!closed) form.dataset.ready = 'true';
  }

  // a field the data's count depends on changed: count again (typing waits for the field to be left)
  form.addEventListener('change', (event) => {
    const field = event.target.closest?.('[data-path]');
    if (datasetSize && field) datasetSize.changed(field.dataset.path);
  });

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
    datasetSize.refresh();
    checkButton.disabled = false;
  });

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!schemaForm) return;
    clearErrors(form, summary);
    launchButton.disabled = true;
    status.textContent = 'Launching…';
    const body = { config: schemaForm.get() }; // the run is named after the config's name
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
      if (datasetSize) datasetSize.destroy();
    },
  };
}
