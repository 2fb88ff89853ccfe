/**
 * A fetch for the MCP SDK's StreamableHTTPClientTransport that gives every request an
 * AbortSignal of its own, linked to the caller's signal only until the response body ends.
 *
 * Why: the transport passes one AbortSignal, alive as long as the transport, to every request
 * (it aborts it on close). Node's fetch (undici) hangs an `abort` listener on the signal per
 * request that goes away only when the garbage collector takes the request, and re-arms the
 * 1,500-listener MaxListenersExceededWarning on each one: a client that makes a few thousand
 * calls holds thousands of listeners and prints a warning per call. AbortSignal.any([signal])
 * is no way out on Node 20: the source keeps every dependant signal in a set that is never
 * pruned. Here the link is one `{ once: true }` listener, removed when the request fails or its
 * body is read to the end, errors or is cancelled; aborting the caller's signal still cuts the
 * request and an open stream, as before.
 *
 * Used by test/support/mcpClient.ts, bench/lib/daemon.mjs and tools/standInAgent.mjs; the
 * same link (`linkSignal`) serves a tool call given a long-lived signal (mcpClient's callTool).
 *
 * @param {typeof fetch} [base]
 * @returns {typeof fetch}
 */
export function fetchWithOwnSignal(base = fetch) {
  return async (input, init) => {
    if (!init?.signal) return base(input, init);
    const { signal, unlink } = linkSignal(init.signal);
    let response;
    try {
      response = await base(input, { ...init, signal });
    } catch (err) {
      unlink();
      throw err;
    }
    if (response.body === null) {
      unlink();
      return response;
    }
    // pipeTo settles however the body ends: read to the end, errored (aborted) or cancelled.
    const { readable, writable } = new TransformStream();
    response.body.pipeTo(writable).then(unlink, unlink);
    const linked = new Response(readable, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
    // The SDK names a redirect's origin from `url` when it reports one it did not follow.
    Object.defineProperty(linked, 'url', { value: response.url });
    return linked;
  };
}

/**
 * A signal of its own that aborts when `outer` does (at once if it has), through one
 * `{ once: true }` listener that `unlink` removes: for a call that must give up with a
 * long-lived signal but would otherwise leave a listener on it (the SDK's `request` adds one
 * per call to `options.signal` and never removes it).
 *
 * @param {AbortSignal} outer
 * @returns {{ signal: AbortSignal, unlink: () => void }}
 */
export function linkSignal(outer) {
  const own = new AbortController();
  const forward = () => own.abort(outer.reason);
  if (outer.aborted) own.abort(outer.reason);
  else outer.addEventListener('abort', forward, { once: true });
  return { signal: own.signal, unlink: () => outer.removeEventListener('abort', forward) };
}
