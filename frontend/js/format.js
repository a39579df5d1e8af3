// Numbers with the units of collapipe_core/metrics.py (s, J, bytes, W, Hz, bit/s, "1").

const SI = [
  [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k'], [1, ''], [1e-3, 'm'], [1e-6, 'µ'], [1e-9, 'n'],
];

function si(value, unit, digits = 3) {
  if (value === 0) return `0 ${unit}`.trim();
  const abs = Math.abs(value);
  for (const [scale, prefix] of SI) {
    if (abs >= scale * 0.9995) return `${trim((value / scale).toPrecision(digits))} ${prefix}${unit}`.trim();
  }
  return `${value.toExponential(2)} ${unit}`.trim();
}

function trim(text) {
  return text.includes('e') ? text : text.replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');
}

function bytes(value) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = value;
  let i = 0;
  // from 1000 on, the next unit: three significant digits of 1000–1023 would need an exponent
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${trim(v.toPrecision(3))} ${units[i]}`;
}

/** A value with its unit for tables and tiles; '—' when missing. */
export function formatValue(value, unit = '1', digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  if (typeof value !== 'number') return String(value);
  if (unit === 'bytes') return bytes(value);
  if (unit === 's' || unit === 'J' || unit === 'W' || unit === 'Hz') return si(value, unit, digits);
  if (unit === 'bit/s') return si(value, 'bit/s', digits);
  return formatNumber(value, digits);
}

export function formatNumber(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e6 || abs < 1e-3)) return value.toExponential(digits - 1);
  return trim(value.toPrecision(digits));
}

export function formatPercent(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  return `${(100 * value).toFixed(digits)} %`;
}

export function formatRatio(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  return `×${value.toFixed(value >= 10 ? 1 : 3)}`;
}

/** A number as typed in a form field: the shorter of plain and exponent notation (2.5e9, 0.005). */
export function numberForInput(value) {
  if (value === null || value === undefined) return '';
  if (typeof value !== 'number') return String(value);
  const plain = String(value);
  const [mantissa, exponent] = value.toExponential().split('e');
  const exp = `${mantissa}e${exponent.replace('+', '')}`;
  const abs = Math.abs(value);
  const tiny = abs !== 0 && abs < 1e-4;
  return (abs >= 1e5 || tiny) && exp.length < plain.length ? exp : plain;
}

export function formatTime(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return date.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' });
}

/** Plotly tick/hover format suited to a unit. */
export function axisFormat(unit) {
  if (unit === 'bytes') return { ticksuffix: 'B', tickformat: '.3~s', hoverformat: '.4~s' };
  if (['s', 'J', 'W', 'Hz', 'bit/s'].includes(unit)) return { ticksuffix: unit === 'bit/s' ? 'bit/s' : unit, tickformat: '.3~s', hoverformat: '.4~s' };
  return { tickformat: '.3~g', hoverformat: '.4~g' };
}
