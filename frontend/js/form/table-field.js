// An array of objects (network.profiles) as an editable table: a row per item, a column per property.
// No rows means null (the schema's "anyOf [array, null]"), which tells the core to draw devices.

import { h, clear, uid } from '../dom.js';
import { numberForInput } from '../format.js';
import { parseNumber } from './fields.js';
import { plainText, richText } from './rich-text.js';

export function tableField(path, label, spec, itemSpec, nullable) {
  const columns = Object.entries(itemSpec.properties);
  const required = new Set(itemSpec.required || []);
  const tbody = h('tbody');
  const rows = [];
  const add = h('button.btn.btn-small', { type: 'button' }, `Add ${label.replace(/s$/, '')}`);
  const caption = h('caption.sr-only', {}, label);
  const table = h('table.object-table', {},
    caption,
    h('thead', {}, h('tr', {}, columns.map(([name, sub]) => h('th', { scope: 'col', title: plainText(sub.description || '') },
      name, required.has(name) ? '' : h('span.muted', {}, ' (opt.)'))), h('th', {}, h('span.sr-only', {}, 'remove')))),
    tbody);
  const empty = h('p.small.muted', {}, 'No rows: devices are drawn from the ranges below.');

  function renumber() {
    rows.forEach((row, i) => {
      row.tr.dataset.path = `${path}.${i}`;
      for (const cell of row.cells) {
        cell.td.dataset.path = `${path}.${i}.${cell.name}`;
        cell.input.name = `${path}.${i}.${cell.name}`;
        cell.input.setAttribute('aria-label', `${cell.name} of row ${i + 1}`);
      }
      row.remove.setAttribute('aria-label', `Remove row ${i + 1}`);
    });
    empty.hidden = rows.length > 0;
    wrap.hidden = rows.length === 0;
  }

  function addRow(value = {}) {
    const cells = columns.map(([name, sub]) => {
      const numeric = sub.type === 'number' || sub.type === 'integer';
      const input = h('input', { id: uid('cell'), type: 'text', inputmode: numeric ? 'decimal' : 'text', autocomplete: 'off' });
      const given = value[name] ?? (required.has(name) ? '' : sub.default);
      input.value = numeric ? numberForInput(given) : (given ?? '');
      const td = h('td', {}, input, h('p.field-error', { role: 'alert', hidden: true }));
      return { name, input, td, numeric, integer: sub.type === 'integer' };
    });
    const remove = h('button.btn.btn-small.btn-quiet', { type: 'button' }, '✕');
    const tr = h('tr', {}, cells.map((c) => c.td), h('td', {}, remove));
    const row = { tr, cells, remove };
    remove.addEventListener('click', () => {
      rows.splice(rows.indexOf(row), 1);
      tr.remove();
      renumber();
    });
    rows.push(row);
    tbody.append(tr);
    renumber();
  }

  add.addEventListener('click', () => {
    addRow(rows.length ? Object.fromEntries(rows[rows.length - 1].cells.map((c) => [c.name, c.input.value])) : {});
    rows[rows.length - 1].cells[0].input.focus();
  });

  const wrap = h('div.table-wrap', {}, table);
  const el = h('div.field.field-wide', { 'data-path': path },
    h('strong.small', {}, label),
    h('span.help', {}, richText(spec.description || '')),
    wrap,
    empty,
    h('div.row', {}, add),
    h('p.field-error', { role: 'alert', hidden: true }));
  renumber();

  return {
    el,
    get() {
      if (!rows.length) return nullable ? null : [];
      return rows.map((row) => Object.fromEntries(row.cells
        .filter((c) => c.input.value.trim() !== '' || required.has(c.name))
        .map((c) => [c.name, c.numeric ? parseNumber(c.input.value, c.integer) : c.input.value])));
    },
    set(value) {
      rows.length = 0;
      clear(tbody);
      for (const item of value || []) addRow(item);
      renumber();
    },
  };
}
