import { getEventListeners } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchWithOwnSignal } from '../support/ownSignalFetch.mjs';

/**
 * The test support's fetch for MCP clients (test/support/ownSignalFetch.mjs) against a local
 * node:http server that answers the ways a gateway does: JSON, 202 with no body, an error with
 * a text body, an event stream that ends, and one that stays open.
 */
describe('a fetch whose requests share one long-lived AbortSignal (the MCP transport’s)', () => {
  let server: Server;
  let url: string;

  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url === '/json')
          res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
        else if (req.url === '/accepted') res.writeHead(202).end();
        else if (req.url === '/error') res.writeHead(500, { 'content-type': 'text/plain' }).end('boom');
        else if (req.url === '/stream') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: 1\n\n');
          setImmediate(() => res.end('data: 2\n\n'));
        } else {
          // Stays open, as the MCP GET stream does until the client closes.
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: open\n\n');
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('2,000 requests leave no abort listener behind on the shared signal (MaxListenersExceededWarning: 1501 abort listeners)', async () => {
    const shared = new AbortController();
    const fetchFn = fetchWithOwnSignal();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    let most = 0;
    try {
      for (let i = 0; i < 2000; i++) {
        const post = { method: 'POST', body: '{}', signal: shared.signal };
        switch (i % 4) {
          case 0:
            expect(await (await fetchFn(`${url}/json`, post)).json()).toEqual({ ok: true });
            break;
          case 1:
            await (await fetchFn(`${url}/accepted`, post)).body?.cancel();
            break;
          case 2:
            expect(await (await fetchFn(`${url}/error`, post)).text()).toBe('boom');
            break;
          default:
            expect(await (await fetchFn(`${url}/stream`, post)).text()).toBe('data: 1\n\ndata: 2\n\n');
        }
        // A body's end reaches the link a tick later, through the pipe.
        await new Promise((resolve) => setImmediate(resolve));
        most = Math.max(most, getEventListeners(shared.signal, 'abort').length);
      }
    } finally {
      process.off('warning', onWarning);
    }
    expect(most, 'abort listeners on the shared signal, at most, after a request').toBeLessThanOrEqual(1);
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0);
    expect(warnings.filter((w) => w.startsWith('MaxListenersExceededWarning'))).toEqual([]);
  }, 60_000);

  it('aborting the shared signal still cuts an open stream, and its link goes with it', async () => {
    const shared = new AbortController();
    const response = await fetchWithOwnSignal()(`${url}/open`, { signal: shared.signal });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: open\n\n');
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(1);
    shared.abort(new Error('transport closed'));
    await expect(reader.read()).rejects.toThrow();
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0);
  });

  it('a request on an already aborted signal fails at once with its reason', async () => {
    const shared = new AbortController();
    shared.abort(new Error('closed before the call'));
    await expect(fetchWithOwnSignal()(`${url}/json`, { signal: shared.signal })).rejects.toThrow(
      'closed before the call',
    );
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0);
  });
});
