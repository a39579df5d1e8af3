// The model section follows the checkpoint and the architecture the user picks:
// - with model.pretrained_path set, the size fields show what the checkpoint's config.json gives
//   (GET /api/config/checkpoint), read-only and left out of the config (the server reads them from the
//   checkpoint), and source and architecture become the checkpoint's; cleared, the fields are editable
//   again;
// - a new architecture sets the kind it trains, and model.hf_config loses the fields the new family's
//   config class lacks (GET /api/config/architectures), as num_kv_heads does (llama only); a note under
//   hf_config says what was dropped.

import { get } from '../api.js';
import { h } from '../dom.js';

export const SIZE_FIELDS = ['d_model', 'num_heads', 'num_kv_heads', 'ffn_dim', 'num_blocks', 'num_decoder_layers', 'vocab_size'];

export function followModel(schemaForm) {
  const widget = (name) => schemaForm.widgets.get(`model.${name}`);
  const path = widget('pretrained_path');
  const architecture = widget('architecture');
  const hfConfig = widget('hf_config');
  const dropped = h('p.small.field-note', { 'data-role': 'dropped', 'aria-live': 'polite', hidden: true });
  hfConfig.el.querySelector('.help').after(dropped);
  const sizesNote = h('p.small.field-note', { 'data-role': 'checkpoint-sizes', 'aria-live': 'polite', hidden: true });
  path.el.querySelector('.help').after(sizesNote);
  let families = null;
  let shown = architecture.get();
  let loads = 0;

  async function familyOf(name) {
    if (!families) families = await get('/api/config/architectures');
    return families[name] || null;
  }

  /** The kind and hf_config fields of ``name``, when it is not the architecture the form showed. */
  async function architectureChosen(name) {
    if (name === shown) return;
    shown = name;
    dropped.hidden = true;
    if (!name) return;
    let family;
    try {
      family = await familyOf(name);
    } catch {
      return; // the fields stay as they are; the check names what the family refuses
    }
    if (!family || shown !== name) return;
    widget('kind').set(family.kind);
    const lacking = [];
    const fields = hfConfig.get();
    if (fields && typeof fields === 'object' && !Array.isArray(fields)) {
      const kept = Object.fromEntries(Object.entries(fields).filter(([key]) => family.config_fields.includes(key)));
      lacking.push(...Object.keys(fields).filter((key) => !(key in kept)));
      if (lacking.length) hfConfig.set(kept);
    }
    const kvHeads = widget('num_kv_heads');
    if (name !== 'llama' && kvHeads.get() !== null && kvHeads.get() !== undefined) {
      kvHeads.set(null);
      lacking.push('num_kv_heads');
    }
    if (lacking.length) {
      dropped.textContent = `Dropped for ${name}, which has no such field: ${lacking.join(', ')}.`;
      dropped.hidden = false;
    }
  }

  function unlockSizes() {
    for (const name of SIZE_FIELDS) widget(name).unlock();
    sizesNote.hidden = true;
  }

  /** Read the checkpoint model.pretrained_path names, and lock the sizes to its config.json's. */
  async function checkpointChosen() {
    const load = ++loads;
    const name = path.get();
    const error = path.el.querySelector('.field-error');
    error.hidden = true;
    error.textContent = '';
    if (!name) {
      unlockSizes();
      return;
    }
    sizesNote.textContent = `Reading ${name}/config.json…`;
    sizesNote.hidden = false;
    let sizes;
    try {
      sizes = await get('/api/config/checkpoint', { path: name });
    } catch (failure) {
      if (load !== loads) return;
      unlockSizes();
      error.textContent = failure.details?.[0]?.message || failure.message;
      error.hidden = false;
      return;
    }
    if (load !== loads) return;
    widget('source').set('transformers');
    architecture.set(sizes.architecture);
    await architectureChosen(sizes.architecture);
    for (const field of SIZE_FIELDS) {
      const value = sizes[field];
      widget(field).lock(value, value === null ? `not a size of ${sizes.architecture}` : `from ${name}/config.json`);
    }
    sizesNote.textContent = `A ${sizes.architecture} checkpoint: its sizes are read from its config.json; `
      + `model.seq_len may be at most ${sizes.max_positions} (its positions).`;
  }

  architecture.input.addEventListener('change', () => architectureChosen(architecture.get()));
  path.input.addEventListener('change', checkpointChosen);

  return {
    /** After the form was set (a preset): take its architecture as shown, and read its checkpoint. */
    async refresh() {
      shown = architecture.get();
      dropped.hidden = true;
      await checkpointChosen();
    },
  };
}
