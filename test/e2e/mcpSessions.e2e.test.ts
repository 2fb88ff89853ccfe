import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { callTool, connectMcp, initializeBody, type Registered } from '../support/mcpClient.js';
import { rssMb } from '../support/processMemory.js';
import { waitFor } from '../support/waitFor.js';

/** The default `mcp.maxSessionsPerEntity`. */
const cap = 16;
// The heap after a forced GC is int's (mcpSessionMemory.int); here the separate process's RSS.
const initializeCalls = 1_500;
/** Old code: ~190 KB a session, +285 MB over 1,500 (+740 MB over 4,000); bounded sessions stay far below this. */
const maxRssGrowthMb = 150;

/** One initialize POST as the SDK client sends it, read to its end; the session is never closed. */
async function initializeRaw(url: string, token: string): Promise<string> {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: initializeBody,
  });
  await res.text();
  const id = res.headers.get('mcp-session-id');
  if (res.status !== 200 || !id) throw new Error(`initialize answered ${res.status} without a session`);
  return id;
}

interface SessionStatus {
  total: number;
  byEntity: Record<string, number>;
}

async function sessionStatus(gateway: GatewayProcess): Promise<SessionStatus> {
  const status = await gateway.cli(['status', '--json']);
  expect(status.code, status.stderr || status.stdout).toBe(0);
  return (JSON.parse(status.stdout) as { mcpSessions: SessionStatus }).mcpSessions;
}

/** `bridge_mcp_sessions{entity="NAME"}` from /metrics; undefined when the entity has none. */
async function sessionGauge(gateway: GatewayProcess, name: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${gateway.port}/metrics`)).text();
  const line = new RegExp(`^bridge_mcp_sessions\\{entity="${name}"\\} (\\d+)$`, 'm').exec(text);
  return line?.[1] === undefined ? undefined : Number(line[1]);
}

function logLines(gateway: GatewayProcess): Array<Record<string, unknown> & { msg?: string }> {
  return gateway.log
    .split('\n')
    .slice(0, -1)
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown> & { msg?: string });
}

describe('MCP sessions are never capped or expired: a client that never closes its sessions', () => {
  let gateway: GatewayProcess;
  let boss: Registered;
  const clients: Client[] = [];

  beforeAll(async () => {
    gateway = new GatewayProcess();
    await gateway.start();
    const reg = await gateway.cli(['register', '--kind', 'main', '--name', 'boss', '--json']);
    expect(reg.code, reg.stderr || reg.stdout).toBe(0);
    boss = JSON.parse(reg.stdout) as Registered;
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await gateway?.dispose();
  });

  it('1,500 initialize calls with one token and no DELETE leave RSS bounded and the sessions at the cap', async () => {
    const pid = gateway.pid as number;
    // Warm up (the first sessions load the SDK's code paths), then measure from there.
    for (let i = 0; i < 50; i++) await initializeRaw(gateway.mcpUrl, boss.token);
    await sleep(500);
    const before = rssMb(pid);
    let peak = before;
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < initializeCalls) {
        next++;
        await initializeRaw(gateway.mcpUrl, boss.token);
        if (next % 200 === 0) peak = Math.max(peak, rssMb(pid));
      }
    };
    const started = Date.now();
    await Promise.all(Array.from({ length: 8 }, worker));
    const seconds = (Date.now() - started) / 1000;
    await sleep(2_000); // a chance for the gateway's GC to run
    const after = rssMb(pid);
    console.log(
      `[mcpSessions] ${initializeCalls} initialize calls in ${seconds.toFixed(1)} s: ` +
        `RSS before ${before.toFixed(0)} MB, peak ${Math.max(peak, after).toFixed(0)} MB, after ${after.toFixed(0)} MB`,
    );
    expect(after - before, 'RSS growth over 1,500 unclosed sessions (MB)').toBeLessThan(maxRssGrowthMb);

    const sessions = await sessionStatus(gateway);
    expect(sessions.byEntity.boss).toBe(cap);
    expect(sessions.total).toBe(cap);
    expect(await sessionGauge(gateway, 'boss')).toBe(cap);
    const evictions = logLines(gateway).filter((l) => l.msg?.startsWith('MCP session closed: over'));
    expect(evictions.length).toBeGreaterThanOrEqual(initializeCalls + 50 - cap);
    expect(evictions[0]).toMatchObject({ entity: 'boss', reason: 'over-cap', level: 40 });
  });

  it('the least recently used session is evicted: its next request gets 404, a fresh client works, DELETE frees one', async () => {
    const oldest = await connectMcp(gateway.mcpUrl, boss.token);
    clients.push(oldest);
    expect((await callTool(oldest, 'bridge_roster', {})).isError).toBeFalsy();
    // Cap more sessions, each used after `oldest`: it is now the least recently used.
    for (let i = 0; i < cap; i++) await initializeRaw(gateway.mcpUrl, boss.token);
    await expect(callTool(oldest, 'bridge_roster', {})).rejects.toMatchObject({ code: 404 });

    const fresh = await connectMcp(gateway.mcpUrl, boss.token);
    clients.push(fresh);
    expect((await callTool(fresh, 'bridge_roster', {})).isError).toBeFalsy();
    expect((await sessionStatus(gateway)).byEntity.boss).toBe(cap);

    await (fresh.transport as StreamableHTTPClientTransport).terminateSession();
    expect((await sessionStatus(gateway)).byEntity.boss).toBe(cap - 1);
    expect(await sessionGauge(gateway, 'boss')).toBe(cap - 1);
  });
});

describe('MCP sessions are never capped or expired: an idle session', () => {
  const idleMs = 1_500;
  let gateway: GatewayProcess;
  let boss: Registered;
  const clients: Client[] = [];

  beforeAll(async () => {
    gateway = new GatewayProcess({ config: { mcp: { sessionIdleMs: idleMs } } });
    await gateway.start();
    for (const name of ['boss', 'peer']) {
      const reg = await gateway.cli(['register', '--kind', 'main', '--name', name, '--json']);
      expect(reg.code, reg.stderr || reg.stdout).toBe(0);
      if (name === 'boss') boss = JSON.parse(reg.stdout) as Registered;
    }
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await gateway?.dispose();
  });

  it('a session whose client went without DELETE is closed after mcp.sessionIdleMs (404 next), one with a call open is not', async () => {
    const gone = await connectMcp(gateway.mcpUrl, boss.token);
    const busy = await connectMcp(gateway.mcpUrl, boss.token);
    clients.push(busy);
    expect((await callTool(gone, 'bridge_roster', {})).isError).toBeFalsy();
    const goneId = (gone.transport as StreamableHTTPClientTransport).sessionId as string;
    expect((await sessionStatus(gateway)).byEntity.boss).toBe(2);

    // An ask that stays open well past the idle time: its session is in use all along.
    const asking = callTool(busy, 'bridge_ask', {
      to: 'peer',
      question: 'still there?',
      timeout_ms: idleMs * 3,
    });
    // The client goes as a crashed or careless one does: its connections close, no DELETE.
    await gone.close();
    await waitFor('the idle session to be closed', async () =>
      (await sessionStatus(gateway)).byEntity.boss === 1 ? true : undefined,
    );
    const line = logLines(gateway).find((l) => l.msg?.startsWith('MCP session closed: idle'));
    expect(line).toMatchObject({ entity: 'boss', reason: 'idle', session: goneId });

    // A client that comes back with the expired session id gets 404 (MCP clients then initialize anew).
    const back = new Client({ name: 'bridge-test', version: '1.0.0' });
    await back.connect(
      new StreamableHTTPClientTransport(new URL(gateway.mcpUrl), {
        sessionId: goneId,
        requestInit: { headers: { Authorization: `Bearer ${boss.token}` } },
      }),
    );
    clients.push(back);
    await expect(callTool(back, 'bridge_roster', {})).rejects.toMatchObject({ code: 404 });

    const asked = await asking;
    expect(asked.isError, 'the ask ends by its own timeout, on a live session').toBe(true);
    expect(JSON.stringify(asked.content)).toContain('ASK_EXPIRED');
    expect((await callTool(busy, 'bridge_roster', {})).isError).toBeFalsy();

    const again = await connectMcp(gateway.mcpUrl, boss.token);
    clients.push(again);
    expect((await callTool(again, 'bridge_roster', {})).isError).toBeFalsy();
  });
});
