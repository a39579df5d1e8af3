// HTTP to the CollaPipe API (same origin, session cookie). Errors keep the API's
// {"error": {"code", "message", "details"}} so views can show each detail next to its field.

export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = error?.code || `http_${status}`;
    this.details = Array.isArray(error?.details) ? error.details : [];
  }
}

let onUnauthenticated = () => {};

/** Called once by main.js: what to do when the session has ended (show the login form). */
export function setUnauthenticatedHandler(handler) {
  onUnauthenticated = handler;
}

/** Query string from an object; arrays repeat the key (fields=a&fields=b); null/undefined/'' are left out. */
export function qs(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    const values = Array.isArray(value) ? value : [value];
    for (const v of values) {
      if (v !== null && v !== undefined && v !== '') search.append(key, String(v));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

export async function request(path, { method = 'GET', body, bytes, signal, quietAuth = false } = {}) {
  // X-CollaPipe: the API accepts a change made with the session cookie only with it (or from this
  // origin); a page of another origin cannot add it without a CORS preflight the API never grants
  const init = { method, credentials: 'same-origin', signal, headers: { Accept: 'application/json', 'X-CollaPipe': '1' } };
  if (bytes !== undefined) {
    // a file's raw bytes (a Blob or File: the browser streams it from disk)
    init.headers['Content-Type'] = 'application/octet-stream';
    init.body = bytes;
  } else if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data?.error || { message: text || response.statusText });
    if (response.status === 401 && !quietAuth) onUnauthenticated(error);
    throw error;
  }
  return data;
}

export const get = (path, params, options) => request(path + qs(params), options);
export const post = (path, body, options) => request(path, { ...options, method: 'POST', body });
export const patch = (path, body, options) => request(path, { ...options, method: 'PATCH', body });
export const del = (path, options) => request(path, { ...options, method: 'DELETE' });
/** PUT a file's bytes as the request body (``params`` as the query string, e.g. {overwrite: true}). */
export const putBytes = (path, bytes, params, options) => request(path + qs(params), { ...options, method: 'PUT', bytes });
