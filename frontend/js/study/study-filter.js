// The "Studies" filter of the runs list and the compare picker: every run, no study's runs (a study's
// runs otherwise flood both: the paper comparison alone is 70 runs), any study's, or one study's (the
// newest 100 studies are offered, from GET /api/studies; a study named in the address is kept).

import { get } from '../api.js';
import { h, uid } from '../dom.js';

const CHOICES = [['', 'all runs'], ['none', 'hide study runs'], ['any', 'only study runs']];
const LISTED_STUDIES = 100;

/** The GET /api/runs parameters of a filter value ('', 'none', 'any' or a study id). */
export function studyParams(value) {
  if (value === 'none') return { in_study: false };
  if (value === 'any') return { in_study: true };
  return /^[1-9]\d*$/.test(value || '') ? { study_id: value } : {};
}

/** A labelled select starting at ``initial``; ``onChange(value)`` when the user picks another. */
export function studyFilter(initial, onChange) {
  const id = uid('filter-study');
  const select = h('select', { id, 'data-filter': 'study' }, CHOICES.map(([value, text]) => h('option', { value }, text)));
  const studyOption = (studyId, text) => h('option', { value: String(studyId), 'data-study-id': studyId }, text);
  const named = /^[1-9]\d*$/.test(initial || '');
  if (named) select.append(studyOption(initial, `study #${initial}`));
  select.value = named || CHOICES.some(([v]) => v === initial) ? initial : '';
  get('/api/studies', { limit: LISTED_STUDIES }).then((page) => {
    const keep = select.value;
    for (const study of page.items) {
      const text = `study: ${study.name} (#${study.id})`;
      const existing = select.querySelector(`option[data-study-id="${study.id}"]`);
      if (existing) existing.textContent = text;
      else select.append(studyOption(study.id, text));
    }
    select.value = keep;
  }).catch((error) => { select.title = `Cannot list the studies: ${error.message}`; }); // the other choices still filter
  select.addEventListener('change', () => onChange(select.value));
  return { control: h('div.control', {}, h('label', { for: id }, 'Studies'), select), select };
}
