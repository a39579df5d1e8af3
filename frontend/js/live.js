// Server-Sent Events from the API (EventSource sends the session cookie).
// EventSource reconnects by itself after a dropped connection (sending Last-Event-ID), but stops for
// good on any answer other than 200: a 503 while the database restarts, a 502 from a proxy while the
// API restarts. This module then opens a new one after a backoff (1 s, doubling to 30 s, with
// jitter), resuming after the last event it received (?after=), until the answer says there is
// nothing more to wait for: 204 (the run is finished and nothing is left to send) or another 4xx
// (access ended, a bad request).
// A round event of a large run carries its first device records and ``devices_total``: the rest is
// fetched a page at a time before the handler gets the event (events reach handlers in order).

const BACKOFF_MS = [1000, 2000, 4000, 8000, 16000, 30000];
const DEVICES_PAGE = 1000;

function backoffMs(attempt) {
  const base = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)];
  return base * (0.75 + Math.random() * 0.5);
}

function isFinal(status) {
  return status === 204 || (status >= 400 && status < 500 && status !== 408 && status !== 429);
}

/** Fill in the device records a round event of run ``runId`` left out (``devices_total``). */
async function completeDevices(runId, data) {
  const round = data.round && data.round.round;
  if (runId === null || !Array.isArray(data.devices) || !Number.isInteger(round)) return;
  while (Number.isInteger(data.devices_total) && data.devices.length < data.devices_total) {
    const query = `offset=${data.devices.length}&limit=${DEVICES_PAGE}`;
    const response = await fetch(`/api/runs/${runId}/rounds/${round}/devices?${query}`, { credentials: 'same-origin' });
    if (!response.ok) throw new Error(`the devices of round ${round}: HTTP ${response.status}`);
    const page = await response.json();
    if (!page.items.length) break;
    data.devices.push(...page.items);
  }
  delete data.devices_total;
}

/**
 * Subscribe to ``url``; ``handlers`` maps event kinds ('round', 'status') to functions of
 * (data, id). Returns a close() function. Parse errors are reported, never thrown into the stream.
 * ``onError(readyState)`` is told EventSource.CONNECTING while the stream is being reopened and
 * EventSource.CLOSED once it has stopped for good.
 */
export function subscribe(url, handlers, { onError, onOpen } = {}) {
  let source = null;
  let lastId = null;
  let attempt = 0;
  let timer = null;
  let probe = null;
  let closed = false;
  let delivered = Promise.resolve(); // events reach the handlers one after the other, in order
  const runMatch = /\/api\/runs\/(\d+)\/events/.exec(url);
  const runId = runMatch ? runMatch[1] : null;

  function currentUrl() {
    if (lastId === null) return url;
    const resumed = new URL(url, window.location.href);
    resumed.searchParams.set('after', lastId);
    return resumed.pathname + resumed.search;
  }

  function report(state) {
    if (onError) onError(state);
  }

  function open() {
    timer = null;
    if (closed) return;
    const current = new EventSource(currentUrl(), { withCredentials: true });
    source = current;
    for (const [kind, handler] of Object.entries(handlers)) {
      current.addEventListener(kind, (event) => {
        if (event.lastEventId) lastId = event.lastEventId;
        let data;
        try {
          data = JSON.parse(event.data);
        } catch (error) {
          console.warn('unreadable live event', kind, error);
          return;
        }
        const id = event.lastEventId;
        delivered = delivered
          .then(() => completeDevices(runId, data))
          .catch((error) => console.warn('live event left incomplete', kind, error))
          .then(() => {
            if (!closed) handler(data, id);
          });
      });
    }
    current.addEventListener('open', () => {
      attempt = 0;
      if (onOpen) onOpen();
    });
    current.addEventListener('error', () => {
      if (current !== source || closed) return;
      if (current.readyState !== EventSource.CLOSED) {
        report(current.readyState); // reconnecting by itself
        return;
      }
      source = null;
      reopenUnlessFinal();
    });
  }

  // The stream was refused: ask what the answer is now (EventSource does not tell) and either stop
  // for good or open a new one after the backoff.
  async function reopenUnlessFinal() {
    report(EventSource.CONNECTING);
    const controller = new AbortController();
    probe = controller;
    let status = null;
    try {
      const response = await fetch(currentUrl(), {
        credentials: 'same-origin',
        headers: { Accept: 'text/event-stream' },
        signal: controller.signal,
      });
      status = response.status;
    } catch (error) {
      status = null; // no answer (the API is down): try again
    } finally {
      controller.abort(); // a 200 would start a stream: the EventSource opens its own
      if (probe === controller) probe = null;
    }
    if (closed) return;
    if (status !== null && isFinal(status)) {
      report(EventSource.CLOSED);
      return;
    }
    const delay = status === 200 ? 0 : backoffMs(attempt);
    attempt += 1;
    timer = setTimeout(open, delay);
  }

  open();
  return () => {
    closed = true;
    if (timer !== null) clearTimeout(timer);
    if (probe !== null) probe.abort();
    if (source !== null) source.close();
  };
}
