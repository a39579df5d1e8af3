// Server-Sent Events from the API (EventSource sends the session cookie).
// The stream of a run ends after its final status; a 204 on reconnect stops EventSource for good.

/**
 * Subscribe to ``url``; ``handlers`` maps event kinds ('round', 'status') to functions of
 * (data, id). Returns a close() function. Parse errors are reported, never thrown into the stream.
 */
export function subscribe(url, handlers, { onError, onOpen } = {}) {
  const source = new EventSource(url, { withCredentials: true });
  for (const [kind, handler] of Object.entries(handlers)) {
    source.addEventListener(kind, (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch (error) {
        console.warn('unreadable live event', kind, error);
        return;
      }
      handler(data, event.lastEventId);
    });
  }
  source.addEventListener('open', () => {
    if (onOpen) onOpen();
  });
  source.addEventListener('error', () => {
    if (onError) onError(source.readyState);
  });
  return () => source.close();
}
