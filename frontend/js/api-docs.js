// The API reference at /docs: the server's OpenAPI document drawn as text (every name and
// description through textContent), one section per tag, one entry per operation.

import { h } from './dom.js';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

/** The last part of a $ref ("#/components/schemas/RunCreate" -> "RunCreate"), or the schema's type. */
function schemaName(schema) {
  if (!schema) return '';
  if (schema.$ref) return schema.$ref.split('/').pop();
  if (schema.type === 'array') return `array of ${schemaName(schema.items)}`;
  if (schema.anyOf) return schema.anyOf.map(schemaName).join(' | ');
  return schema.type || 'object';
}

function operation(path, method, op) {
  const params = (op.parameters || []).map((p) => h('li', {},
    h('code', {}, p.name), ` (${p.in}${p.required ? ', required' : ''}, ${schemaName(p.schema)})`,
    p.description ? ` — ${p.description}` : ''));
  const body = op.requestBody?.content;
  const bodyTypes = body ? Object.entries(body).map(([type, media]) => `${type}: ${schemaName(media.schema)}`) : [];
  const responses = Object.entries(op.responses || {}).map(([code, r]) => `${code} ${r.description || ''}`.trim());
  return h('section.panel', { 'data-operation': `${method.toUpperCase()} ${path}` },
    h('h3', {}, h('code', {}, `${method.toUpperCase()} ${path}`), op.summary ? ` — ${op.summary}` : ''),
    op.description ? h('p', {}, op.description) : null,
    params.length ? h('div', {}, h('strong', {}, 'Parameters'), h('ul', {}, params)) : null,
    bodyTypes.length ? h('p', {}, h('strong', {}, 'Body: '), bodyTypes.join('; ')) : null,
    h('p.small.muted', {}, `Responses: ${responses.join(' · ')}`));
}

async function render() {
  const target = document.getElementById('operations');
  const response = await fetch('/openapi.json', { headers: { Accept: 'application/json' } });
  const spec = await response.json();
  const byTag = new Map();
  for (const [path, item] of Object.entries(spec.paths || {})) {
    for (const method of METHODS) {
      if (!item[method]) continue;
      const tag = (item[method].tags || ['other'])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(operation(path, method, item[method]));
    }
  }
  target.replaceChildren(...[...byTag].map(([tag, ops]) => h('section', {}, h('h2', {}, tag), ops)));
}

render().catch((error) => {
  document.getElementById('operations').textContent = `The API description could not be loaded: ${error.message}`;
});
