// Axis ticks of the run view's charts that plotly.js does not draw as the rest of the page reads:
// - bytes in the units of the page's tiles and tables (formatValue: B, KiB, MiB, GiB — plotly.js
//   only knows decimal SI prefixes), as ticks placed at round binary values and hover texts;
// - logarithmic axes without crowded labels: between about one and three decades plotly.js labels
//   every digit of a decade (100, 200, … 900, 1k), and on a chart 300 px high those labels overlap.

import { formatValue } from '../format.js';

const NICE = [1, 2, 5, 10];
const MAX_UNIT = 1024 ** 4; // TiB, formatValue's largest
const TICKS = 5;

/** Ticks of a bytes axis spanning [lo, hi]: {tickvals, ticktext} at round multiples of the unit
 * formatValue writes ``hi`` in, labelled by formatValue (no two labels alike). */
export function byteTicks(lo, hi) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return { tickvals: [], ticktext: [] };
  if (lo === 0 && hi === 0) return { tickvals: [0], ticktext: [formatValue(0, 'bytes')] };
  const top = Math.max(Math.abs(lo), Math.abs(hi), 1);
  let scale = 1;
  while (top / scale >= 1000 && scale < MAX_UNIT) scale *= 1024;
  const span = (hi - lo) / scale || top / scale / 10; // a flat series: ticks around its value
  let step = 10 ** Math.floor(Math.log10(span / TICKS));
  step *= NICE.find((n) => n * step >= span / TICKS);
  for (;;) {
    const bytes = step * scale;
    const first = Math.ceil((hi === lo ? lo - 2 * bytes : lo) / bytes);
    const last = Math.floor((hi === lo ? hi + 2 * bytes : hi) / bytes);
    const tickvals = [];
    for (let i = first; i <= last; i += 1) tickvals.push(i * bytes);
    const ticktext = tickvals.map((v) => formatValue(v, 'bytes'));
    if (new Set(ticktext).size === ticktext.length) return { tickvals, ticktext };
    step *= 2; // labels of three significant digits that collide: coarser ticks
  }
}

const texts = new Map();

/** formatValue(value, 'bytes'), remembered: a live chart labels the same few values again and again. */
export function bytesText(value) {
  if (value === null || value === undefined) return '';
  let text = texts.get(value);
  if (text === undefined) {
    if (texts.size > 10000) texts.clear();
    text = formatValue(value, 'bytes');
    texts.set(value, text);
  }
  return text;
}

/** The tick step of a logarithmic axis over ``values``: 'D2' (1, 2 and 5 of each decade) when they
 * span from 0.8 to 3 decades, where plotly.js would label every digit; otherwise null (plotly.js's
 * own choice: linear steps within a decade, whole decades across many). */
export function logTickStep(values) {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (v > 0 && Number.isFinite(v)) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
  }
  if (!(max > 0)) return null;
  const decades = Math.log10(max / min);
  return decades >= 0.8 && decades < 3 ? 'D2' : null;
}

/** The layout fields of a log axis for ``step`` (logTickStep). */
export function logAxisTicks(step) {
  return step ? { tickmode: 'linear', dtick: step } : { tickmode: 'auto', dtick: null };
}
