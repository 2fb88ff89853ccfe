import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { waitFor } from '../support/waitFor.js';

interface RawResponse {
  status: number;
  body: string;
}

/**
 * One request with the headers exactly as given, the way a browser tricked by a rebound name
 * would send them (fetch cannot set Host). The connection always goes to the gateway's socket.
 */
function rawRequest(
  gateway: GatewayProcess,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: gateway.port,
        path,
        method: body === undefined ? 'GET' : 'POST',
        headers,
        setHost: false,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The daemon's pino lines so far. */
function logLines(gateway: GatewayProcess): Array<Record<string, unknown> & { msg?: string }> {
  return gateway.log
    .split('\n')
    .slice(0, -1) // the last piece may be a line still being written
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown> & { msg?: string });
}

const initialize = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'rebind', version: '1' } },
});

describe('DNS rebinding: Host and Origin are checked on every HTTP route', () => {
  let gateway: GatewayProcess;
  let token: string;
  const routes = ['/mcp', '/metrics', '/healthz', '/nowhere'];

  beforeAll(async () => {
    gateway = new GatewayProcess({ config: { mcp: { allowedHosts: ['bridge.test'] } } });
    await gateway.start();
    token = JSON.parse((await gateway.cli(['register', '--kind', 'main', '--name', 'boss', '--json'])).stdout)
      .token as string;
  });

  afterAll(async () => {
    await gateway?.dispose();
  });

  /** A request to `path` that passes the check gets what that route gives (MCP: an initialize). */
  function routeRequest(path: string, headers: Record<string, string>): Promise<RawResponse> {
    if (path !== '/mcp') return rawRequest(gateway, path, headers);
    return rawRequest(
      gateway,
      path,
      {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...headers,
      },
      initialize,
    );
  }

  it.each(routes)('Host: evil.example gets 403 HOST_NOT_ALLOWED on %s, and a log line', async (path) => {
    const res = await routeRequest(path, { host: `evil.example:${gateway.port}` });
    expect(res.status).toBe(403);
    expect(JSON.parse(res.body).error.message).toMatch(
      /^HOST_NOT_ALLOWED: Host "evil\.example:\d+" is not a name this gateway answers to.*mcp\.allowedHosts/,
    );
    // The daemon's log line may reach its stdout a moment after the response.
    const line = await waitFor(`the refusal of ${path} in the gateway log`, () =>
      logLines(gateway).find(
        (entry) => entry.path === path && /^http request refused: Host "evil\.example/.test(entry.msg ?? ''),
      ),
    );
    expect(line).toMatchObject({ level: 40, host: `evil.example:${gateway.port}` });
  });

  it.each(routes)('Origin: http://evil.example gets 403 on %s though Host is loopback', async (path) => {
    const res = await routeRequest(path, {
      host: `127.0.0.1:${gateway.port}`,
      origin: 'http://evil.example',
    });
    expect(res.status).toBe(403);
    expect(JSON.parse(res.body).error.message).toMatch(/^HOST_NOT_ALLOWED: Origin "http:\/\/evil\.example"/);
  });

  it('a rebound Host is refused before the token is even looked at', async () => {
    const res = await rawRequest(gateway, '/mcp', { host: 'evil.example' }, initialize);
    expect(res.status).toBe(403);
  });

  it.each(['/mcp', '/metrics', '/healthz'])(
    'loopback names at the gateway port pass on %s, with or without a same-origin Origin',
    async (path) => {
      for (const name of ['127.0.0.1', 'localhost', '[::1]']) {
        const host = `${name}:${gateway.port}`;
        expect((await routeRequest(path, { host })).status, host).toBe(200);
        expect((await routeRequest(path, { host, origin: `http://${host}` })).status, host).toBe(200);
      }
    },
  );

  it.each(['/mcp', '/metrics', '/healthz'])(
    'a host listed in mcp.allowedHosts passes on %s',
    async (path) => {
      const host = `bridge.test:${gateway.port}`;
      expect((await routeRequest(path, { host })).status).toBe(200);
      expect((await routeRequest(path, { host, origin: `http://${host}` })).status).toBe(200);
    },
  );

  it('counts the refusals in bridge_rejected_requests_total', async () => {
    const res = await routeRequest('/metrics', { host: `localhost:${gateway.port}` });
    expect(res.body).toMatch(/bridge_rejected_requests_total\{code="HOST_NOT_ALLOWED"\} (\d+)/);
    const count = Number(
      /bridge_rejected_requests_total\{code="HOST_NOT_ALLOWED"\} (\d+)/.exec(res.body)?.[1],
    );
    expect(count).toBeGreaterThanOrEqual(routes.length * 2 + 1);
  });
});
