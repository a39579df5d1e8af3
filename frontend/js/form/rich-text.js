// Descriptions come from the config's docstrings (the JSON Schema's "description"), which mark literals
// as ``source: builtin`` or `collapipe calibrate CONFIG`: shown as code, never as backticks.

import { h } from '../dom.js';

const LITERAL = /``([^`]+)``|`([^`]+)`/g;

/** ``text`` as nodes for h(): plain text, and a <code> for each literal. */
export function richText(text) {
  const source = String(text ?? '');
  const nodes = [];
  let last = 0;
  for (const match of source.matchAll(LITERAL)) {
    if (match.index > last) nodes.push(source.slice(last, match.index));
    nodes.push(h('code', {}, match[1] ?? match[2]));
    last = match.index + match[0].length;
  }
  if (last < source.length) nodes.push(source.slice(last));
  return nodes;
}

/** ``text`` without its literal markup, for attributes (a title, an aria-label). */
export function plainText(text) {
  return String(text ?? '').replace(LITERAL, (_, double, single) => double ?? single);
}
