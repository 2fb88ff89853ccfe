import { readdirSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { initializeBody, type Registered } from '../support/mcpClient.js';
import { rssMb } from '../support/processMemory.js';
import { waitFor } from '../support/waitFor.js';

const perEntity = 40;
const perGateway = 60;
const maxConnections = 300;
/** Attempts in the burst: ten times the connections the gateway keeps. */
const burst = 3_000;
/** On main, 5,000 parked drains cost ~200 MB and 5,000 descriptors. */
const maxRssGrowthMb = 150;

interface Answer {
  /** The tool error's code, `parked` while still open, or what the connection ended with. */
  outcome: string;
}

/** An MCP session opened without the SDK: initialize, then the initialized notification. */
async function openSession(url: string, token: string): Promise<string> {
  const headers = {
    authorization: `Bearer ${token}`,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
  };
  const res = await fetch(url, { method: 'POST', headers, body: initializeBody });
  await res.text();
  const id = res.headers.get('mcp-session-id');
  if (res.status !== 200 || !id) throw new Error(`initialize answered ${res.status} without a session`);
  const note = await fetch(url, {
    method: 'POST',
    headers: { ...headers, 'mcp-session-id': id },
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  await note.text();
  return id;
}

/**
 * One `bridge_drain {wait_ms}` on a connection of its own, as a client that fires calls
 * without waiting does. Resolves with the tool error's code, or the socket error, once answered;
 * `parked` calls are counted through `onOpen` and stay open until the gateway stops.
 */
function drainCall(url: URL, token: string, session: string, id: number): Promise<Answer> {
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: 'bridge_drain', arguments: { wait_ms: 120_000 } },
  });
  return new Promise((resolve) => {
    const req = request(
      url,
      {
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': session,
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => {
          const code = /"code":"([A-Z_]+)"/.exec(text)?.[1];
          resolve({ outcome: code ?? `http ${res.statusCode}` });
        });
        res.on('error', (err: NodeJS.ErrnoException) => resolve({ outcome: err.code ?? err.message }));
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ outcome: err.code ?? err.message }));
    req.end(body);
  });
}

/** One `bridge_drain {wait_ms}` through fetch, read to its end: for a call expected to be refused at once. */
async function drainText(url: string, token: string, session: string): Promise<string> {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': session,
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'bridge_drain', arguments: { wait_ms: 120_000 } },
    }),
    signal: AbortSignal.timeout(5_000),
  });
  return res.text();
}

/** `bridge_parked_calls` from /metrics. */
async function parkedGauge(gateway: GatewayProcess): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${gateway.port}/metrics`)).text();
  const line = /^bridge_parked_calls (\d+)$/m.exec(text);
  return line?.[1] === undefined ? undefined : Number(line[1]);
}

function fds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

function tally(answers: Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { outcome } of answers) counts[outcome] = (counts[outcome] ?? 0) + 1;
  return counts;
}

async function register(g: GatewayProcess, name: string): Promise<Registered> {
  const r = await g.cli(['register', '--kind', 'main', '--name', name, '--json']);
  expect(r.code, r.stderr || r.stdout).toBe(0);
  return JSON.parse(r.stdout) as Registered;
}

/**
 * Issue 29 item 7: parked long-poll drains were unbounded. 5,000 parked `bridge_drain {wait_ms}`
 * on one token took a gateway from 96 to 302 MB and 5,032 descriptors; 20,400 from two clients,
 * 16,456 descriptors and 826 MB. Parked calls are now capped per entity
 * (limits.maxParkedPerEntity) and per gateway (limits.maxParked), each refusal a TOO_MANY_PARKED
 * that says what to do, and the HTTP server keeps at most mcp.maxConnections connections.
 */
describe('parked drains are bounded per entity and per gateway', () => {
  let gateway: GatewayProcess;
  const url = () => new URL(gateway.mcpUrl);

  beforeAll(async () => {
    gateway = new GatewayProcess({
      config: {
        limits: { maxParkedPerEntity: perEntity, maxParked: perGateway },
        mcp: { maxConnections },
      },
    });
    await gateway.start();
  });

  afterAll(async () => {
    await gateway?.dispose();
  });

  it('parks up to the caps and refuses the rest with TOO_MANY_PARKED, saying which cap', async () => {
    const a = await register(gateway, 'pollerA');
    const b = await register(gateway, 'pollerB');
    const sessionA = await openSession(gateway.mcpUrl, a.token);
    const sessionB = await openSession(gateway.mcpUrl, b.token);

    const answeredA: Answer[] = [];
    for (let i = 0; i < 100; i++)
      void drainCall(url(), a.token, sessionA, 100 + i).then((x) => answeredA.push(x));
    await waitFor('the calls over pollerA’s cap answered', async () =>
      answeredA.length >= 100 - perEntity ? true : undefined,
    );
    expect(tally(answeredA)).toEqual({ TOO_MANY_PARKED: 100 - perEntity });
    const refusedA = await drainText(gateway.mcpUrl, a.token, sessionA);
    expect(refusedA).toMatch(/TOO_MANY_PARKED: .*limits\.maxParkedPerEntity/);

    const answeredB: Answer[] = [];
    for (let i = 0; i < perGateway - perEntity; i++)
      void drainCall(url(), b.token, sessionB, 300 + i).then((x) => answeredB.push(x));
    await waitFor('every call under the caps parked', async () =>
      (await parkedGauge(gateway)) === perGateway ? true : undefined,
    );
    // The gateway's cap is reached: the next call is refused with the words of that cap.
    const refusedB = await drainText(gateway.mcpUrl, b.token, sessionB);
    expect(answeredB).toEqual([]);
    expect(refusedB).toMatch(/TOO_MANY_PARKED: .*limits\.maxParked\b/);
  });

  it('a burst of 3,000 drains on new connections leaves the gateway’s descriptors and memory bounded', async () => {
    const a = await register(gateway, 'burst');
    const session = await openSession(gateway.mcpUrl, a.token);
    const pid = gateway.pid as number;
    const rssBefore = rssMb(pid);
    let fdPeak = fds(pid);
    const sampler = setInterval(() => {
      fdPeak = Math.max(fdPeak, fds(pid));
    }, 5);
    // A call still open after this long is parked: the caps should have left none.
    const stillParked = new Promise<Answer>((resolve) =>
      setTimeout(() => resolve({ outcome: 'still parked' }), 15_000).unref(),
    );
    const answers = await Promise.all(
      Array.from({ length: burst }, (_, i) =>
        Promise.race([drainCall(url(), a.token, session, 10_000 + i), stillParked]),
      ),
    );
    clearInterval(sampler);
    const rssAfter = rssMb(pid);
    const counts = tally(answers);
    console.log(
      `PARKED_BURST ${JSON.stringify({ burst, counts, fdPeak, fdsAfter: fds(pid), rssBefore, rssAfter })}`,
    );
    expect(fdPeak).toBeLessThan(maxConnections + 200);
    // Every attempt is answered: refused by the cap, or its connection refused beyond mcp.maxConnections.
    for (const outcome of Object.keys(counts)) expect(['TOO_MANY_PARKED', 'ECONNRESET']).toContain(outcome);
    expect(counts.TOO_MANY_PARKED).toBeGreaterThan(0);
    expect(rssAfter - rssBefore).toBeLessThan(maxRssGrowthMb);
    expect(await gateway.healthy()).toBe(true);
    const metrics = await (await fetch(`http://127.0.0.1:${gateway.port}/metrics`)).text();
    expect(metrics).toMatch(/^bridge_parked_calls \d+$/m);
  });
});
