import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { type Daemon, startDaemon } from '../../src/daemon/startDaemon.js';
import { silentLogger } from '../../src/log/logger.js';
import { initializeBody } from '../support/mcpClient.js';

// What a session leaves behind is measured on the heap after a full collection: RSS (the e2e
// test's measure) also counts garbage not yet collected, too coarse for a few MB.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const calls = 1_000;
/** Old code kept ~35 KB (a refused initialize) to ~190 KB (a session) per call; now ~1 KB is noise. */
const maxRetainedMb = 10;

function heapUsedMb(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 1024 / 1024;
}

describe('MCP sessions are never capped or expired: what initialize calls leave on the heap', () => {
  let home: string;
  let daemon: Daemon;
  let token: string;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-mcpmem-'));
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'mcpmem', BRIDGE_MCP_PORT: '0' },
    });
    daemon = await startDaemon({ config, logger: silentLogger() });
    token = (await daemon.gateway.services.registrations.register({ kind: 'main', name: 'boss' })).token;
  });

  afterAll(async () => {
    await daemon?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  /** `calls` initialize POSTs with `accept`, one at a time; the MB the heap kept and the statuses seen. */
  async function retainedBy(accept: string): Promise<{ mb: number; statuses: Set<number> }> {
    const statuses = new Set<number>();
    const one = async () => {
      const res = await fetch(daemon.mcpUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept },
        body: initializeBody,
      });
      await res.text();
      statuses.add(res.status);
    };
    for (let i = 0; i < 50; i++) await one();
    const before = heapUsedMb();
    for (let i = 0; i < calls; i++) await one();
    await new Promise((r) => setTimeout(r, 200));
    const after = heapUsedMb();
    console.log(
      `[mcpSessionMemory] ${calls} initialize calls (accept ${accept}): heap after GC ${before.toFixed(1)} -> ${after.toFixed(1)} MB`,
    );
    return { mb: after - before, statuses };
  }

  it('initialize calls beyond the cap, never closed, keep only the capped sessions', async () => {
    const { mb, statuses } = await retainedBy('application/json, text/event-stream');
    expect([...statuses]).toEqual([200]);
    expect(mb, `heap kept by ${calls} unclosed sessions (MB)`).toBeLessThan(maxRetainedMb);
    expect((await daemon.gateway.services.status.status()).mcpSessions).toEqual({
      total: 16,
      byEntity: { boss: 16 },
    });
  });

  it('initialize calls the transport refuses (406: no text/event-stream in Accept) keep nothing', async () => {
    const { mb, statuses } = await retainedBy('application/json');
    expect([...statuses]).toEqual([406]);
    expect(mb, `heap kept by ${calls} refused initialize calls (MB)`).toBeLessThan(maxRetainedMb);
  });
});
