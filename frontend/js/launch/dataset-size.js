// Beside data.samples_per_cluster: how many samples the config's data hold (POST /api/config/dataset:
// rows, samples after filtering, or windows of seq_len + 1 tokens) and the largest samples_per_cluster
// and eval_samples they allow — each with the other as the form has it — with a button that sets it.
// Counted on "Count the data", on "Check & pre-flight", and when a field the count depends on changes
// (the data section, the model's lengths, kind, architecture or checkpoint, the number of clusters);
// not when a preset is loaded (a tokenizer trained for nothing would slow the server's other checks).

import { post } from '../api.js';
import { h, clear } from '../dom.js';

const COUNTED_FROM = ['data.', 'model.seq_len', 'model.target_len', 'model.kind', 'model.architecture',
  'model.source', 'model.pretrained_path', 'network.num_clusters', 'seed'];
const DELAY_MS = 500;

const count = (n) => n.toLocaleString('en-US');

export function createDatasetSize(schemaForm) {
  const perCluster = schemaForm.widgets.get('data.samples_per_cluster');
  const evalSamples = schemaForm.widgets.get('data.eval_samples');
  const box = h('div.field.field-wide.dataset-size', { 'data-role': 'dataset-size', 'aria-live': 'polite' });
  perCluster.el.before(box);
  let loads = 0;
  let timer = null;

  function offer(widget, name, largest, given) {
    if (largest < 1) {
      return h('p.small.bad', { 'data-largest': name }, `No ${name} fits ${given}: lower it.`);
    }
    const button = h('button.btn.btn-small', { type: 'button', 'data-use': name }, `Use ${largest}`);
    button.addEventListener('click', () => {
      widget.set(largest);
      refresh();
    });
    return h('p.small', { 'data-largest': name }, `Largest ${name} ${given}: ${count(largest)} `, button);
  }

  function render(size) {
    const held = size.held_out === null
      ? ' (data.eval_samples are held out of them)'
      : `, and its eval file ${count(size.held_out)} (data.files.eval)`;
    clear(box).append(
      h('p.small', { 'data-role': 'dataset-count' }, h('strong', {}, size.source),
        ` holds ${count(size.train)} usable ${size.unit}${held}.`),
      offer(perCluster, 'data.samples_per_cluster', size.max_samples_per_cluster,
        size.held_out === null ? 'with this data.eval_samples' : 'for these clusters'),
      offer(evalSamples, 'data.eval_samples', size.max_eval_samples,
        size.held_out === null ? 'with this data.samples_per_cluster' : 'in the eval file'),
    );
  }

  /** Before a count: a button that counts. */
  function reset() {
    clearTimeout(timer);
    loads += 1;
    const button = h('button.btn.btn-small', { type: 'button', 'data-role': 'count' }, 'Count the data');
    button.addEventListener('click', () => refresh());
    clear(box).append(h('p.small.muted', {}, 'How many samples the data hold, and the most that fit: ', button));
  }

  /** Count the data of the form's config now. */
  async function refresh() {
    clearTimeout(timer);
    const load = ++loads;
    clear(box).append(h('p.small.muted', {}, 'Counting the data…'));
    let size;
    try {
      size = await post('/api/config/dataset', schemaForm.get());
    } catch (error) {
      if (load !== loads) return;
      const detail = error.details?.[0];
      const where = detail?.field ? `${String(detail.field).replace(/^config\./, '')}: ` : '';
      clear(box).append(h('p.small.bad', { 'data-role': 'dataset-count' },
        `The data cannot be counted — ${where}${detail?.message || error.message}`));
      return;
    }
    if (load !== loads) return;
    render(size);
  }

  /** Count again shortly after a field the count depends on changed (``path``: the field's path). */
  function changed(path) {
    if (!COUNTED_FROM.some((prefix) => path === prefix || (prefix.endsWith('.') && path.startsWith(prefix)))) return;
    clearTimeout(timer);
    timer = setTimeout(refresh, DELAY_MS);
  }

  reset();
  return { refresh, reset, changed, destroy: () => clearTimeout(timer) };
}
