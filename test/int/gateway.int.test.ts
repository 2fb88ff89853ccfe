import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { Gateway } from '../../src/actors/gateway.js';
import { loadConfig } from '../../src/config/loadConfig.js';
import type {
  PaneInjector,
  PaneMessage,
  PaneStatus,
  SubmitOutcome,
  TypeOutcome,
  Whereabouts,
} from '../../src/inject/paneInjector.js';
import { silentLogger } from '../../src/log/logger.js';

/** A pane that records what is typed and fails when told to: the gateway's side is under test. */
class ScriptedPane implements PaneInjector {
  typed: string[] = [];
  failing = false;
  /** While set, inject() never settles: the gateway is "killed" mid-typing. */
  hanging = false;
  private listener: ((s: PaneStatus) => void) | undefined;
  async type({ text }: PaneMessage): Promise<TypeOutcome> {
    if (this.failing) throw new Error('pane is gone');
    if (this.hanging) return new Promise(() => {});
    this.typed.push(text);
    return { kind: 'submitted', how: 'scripted' };
  }
  async submit(): Promise<SubmitOutcome> {
    return { kind: 'submitted', how: 'scripted' };
  }
  async locate({ marker }: PaneMessage): Promise<Whereabouts> {
    return (await this.contains(marker)) ? 'submitted' : 'absent';
  }
  async contains(marker: string): Promise<boolean> {
    return this.typed.some((t) => t.includes(marker));
  }
  watchStatus(listener: (s: PaneStatus) => void): () => void {
    this.listener = listener;
    queueMicrotask(() => listener('idle'));
    return () => {
      this.listener = undefined;
    };
  }
  setStatus(status: PaneStatus): void {
    this.listener?.(status);
  }
  async close(): Promise<void> {}
}

describe('gateway actors in-process (real SQLite, simulated clock)', () => {
  let home: string;
  let clock: SimulatedClock;
  let pane: ScriptedPane;
  let gateway: Gateway;
  /** Lets effects run and their writes commit (the commits run on the writer thread). */
  const settle = async () => {
    for (let i = 0; i < 3; i++) {
      await gateway.flush();
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  const boot = async () => {
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'h1' },
    });
    const gw = new Gateway({
      config: {
        ...config,
        delivery: { ...config.delivery, ttlMs: 60_000, maxAttempts: 3, retryBaseMs: 1_000 },
      },
      logger: silentLogger(),
      clock,
      createInjector: () => pane,
    });
    await gw.start();
    return gw;
  };
  const events = (sql: string) => {
    const db = new Database(join(home, 'events.db'), { readonly: true });
    try {
      return db.prepare(sql).all();
    } finally {
      db.close();
    }
  };

  beforeEach(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-gwint-'));
    clock = new SimulatedClock();
    clock.set(1_700_000_000_000);
    pane = new ScriptedPane();
    gateway = await boot();
  });
  afterEach(async () => {
    await gateway.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it('retries a failing pane with backoff, then dead-letters with delivery-limit and keeps the body', async () => {
    const worker = await gateway.register({
      kind: 'worker',
      name: 'w',
      pane: { type: 'tmux', target: '%1' },
    });
    const main = await gateway.register({ kind: 'main', name: 'm' });
    const sender = gateway.authenticate(main.token)!;
    pane.failing = true;
    const { msgId } = await gateway.send(sender, { kind: 'SEND', to: 'w', text: 'doomed' });
    await settle();
    expect(gateway.roster().find((e) => e.name === 'w')?.depth).toBe(1);
    clock.increment(1_000); // first retry
    await settle();
    clock.increment(2_000); // second retry, third attempt fails: limit reached
    await settle();
    expect(gateway.roster().find((e) => e.gid === worker.gid)?.depth).toBe(0);
    const trail = events(
      `SELECT event, to_state FROM events WHERE msg_id = '${msgId}' AND actor_kind = 'delivery' ORDER BY seq`,
    );
    expect(trail.map((r) => (r as { to_state: string }).to_state)).toEqual([
      'pending',
      'injecting',
      'backoff',
      'pending',
      'injecting',
      'backoff',
      'pending',
      'injecting',
      'dead-lettered',
    ]);
    const kept = events(`SELECT envelope FROM messages WHERE msg_id = '${msgId}'`);
    expect(JSON.parse((kept[0] as { envelope: string }).envelope)).toMatchObject({ text: 'doomed' });
    const metrics = await gateway.metrics.registry.getSingleMetricAsString('bridge_dead_letters_total');
    expect(metrics).toContain('reason="delivery-limit"} 1');
  });

  it('expires a held message after its TTL, across a restart of the gateway', async () => {
    const a = await gateway.register({ kind: 'main', name: 'a' });
    await gateway.register({ kind: 'main', name: 'b' });
    const { msgId } = await gateway.send(gateway.authenticate(a.token)!, {
      kind: 'SEND',
      to: 'b',
      text: 'stale soon',
    });
    clock.increment(30_000);
    await gateway.stop();
    gateway = await boot(); // the expiry timer is re-armed from the deadline in the log
    await settle();
    clock.increment(29_000);
    await settle();
    expect(gateway.roster().find((e) => e.name === 'b')?.depth).toBe(1);
    clock.increment(2_000);
    await settle();
    expect(gateway.roster().find((e) => e.name === 'b')?.depth).toBe(0);
    const last = events(
      `SELECT event, to_state, data FROM events WHERE msg_id = '${msgId}' AND actor_kind = 'delivery' ORDER BY seq DESC LIMIT 1`,
    )[0] as { to_state: string };
    expect(last.to_state).toBe('dead-lettered');
  });

  it('does not type while the pane is busy, keeps order, and purges bodies once typed', async () => {
    await gateway.register({ kind: 'worker', name: 'w', pane: { type: 'herdr', paneId: 'p1' } });
    const main = await gateway.register({ kind: 'main', name: 'm' });
    const sender = gateway.authenticate(main.token)!;
    await settle();
    pane.setStatus('working');
    for (const text of ['one', 'two', 'three']) await gateway.send(sender, { kind: 'SEND', to: 'w', text });
    await settle();
    expect(pane.typed).toEqual([]);
    expect(gateway.roster().find((e) => e.name === 'w')?.status).toBe('active.busy');
    pane.setStatus('idle');
    await settle();
    await settle();
    expect(pane.typed.map((t) => t.split('] ')[1])).toEqual(['one', 'two', 'three']);
    expect(events('SELECT count(*) AS n FROM messages')).toEqual([{ n: 0 }]);
    const digests = events(
      "SELECT data FROM events WHERE actor_kind = 'delivery' AND event = 'xstate.init'",
    ) as Array<{ data: string }>;
    for (const row of digests) {
      const data = JSON.parse(row.data) as Record<string, unknown>;
      expect(data).toMatchObject({
        digest: expect.stringMatching(/^[0-9a-f]{32}$/),
        size: expect.any(Number),
      });
      expect(JSON.stringify(data)).not.toMatch(/one|two|three/);
    }
  });

  for (const typedBeforeCrash of [true, false]) {
    it(`recovers a delivery interrupted mid-typing: ${typedBeforeCrash ? 'found in the pane, not typed again' : 'absent, typed once'}`, async () => {
      await gateway.register({ kind: 'worker', name: 'w', pane: { type: 'tmux', target: '%1' } });
      const main = await gateway.register({ kind: 'main', name: 'm' });
      pane.hanging = true;
      const { msgId } = await gateway.send(gateway.authenticate(main.token)!, {
        kind: 'SEND',
        to: 'w',
        text: 'hello',
      });
      await settle();
      // The crash: `injecting` is on disk; whether the text reached the pane is unknown.
      await gateway.stop();
      pane.hanging = false;
      if (typedBeforeCrash) pane.typed.push(`[bridge SEND from m@h1 msg ${msgId}] hello`);
      gateway = await boot();
      await settle();
      await settle();
      expect(pane.typed.filter((t) => t.includes(msgId))).toHaveLength(1);
      expect(gateway.roster().find((e) => e.name === 'w')?.depth).toBe(0);
      const trail = events(
        `SELECT to_state FROM events WHERE msg_id = '${msgId}' AND actor_kind = 'delivery' ORDER BY seq`,
      ).map((r) => (r as { to_state: string }).to_state);
      expect(trail).toEqual(
        typedBeforeCrash
          ? ['pending', 'injecting', 'verifying', 'injected', 'acked']
          : ['pending', 'injecting', 'verifying', 'pending', 'injecting', 'injected', 'acked'],
      );
    });
  }

  it('deregistering a recipient dead-letters what it had not received', async () => {
    const main = await gateway.register({ kind: 'main', name: 'm' });
    await gateway.register({ kind: 'main', name: 'gone-soon' });
    await gateway.send(gateway.authenticate(main.token)!, {
      kind: 'SEND',
      to: 'gone-soon',
      text: 'left behind',
    });
    await gateway.deregister('gone-soon');
    const rows = events(
      "SELECT reason FROM (SELECT json_extract(data, '$.reason') AS reason FROM events WHERE event = 'delivery.deadLettered')",
    );
    expect(rows).toEqual([{ reason: 'recipient-gone' }]);
    expect(() => gateway.directory.resolve('gone-soon')).toThrow(/unknown recipient/);
  });

  it('an idempotency key returns the first msgId and sends nothing new', async () => {
    const main = await gateway.register({ kind: 'main', name: 'm' });
    await gateway.register({ kind: 'main', name: 'r' });
    const sender = gateway.authenticate(main.token)!;
    const first = await gateway.send(sender, { kind: 'SEND', to: 'r', text: 'once', idempotencyKey: 'k1' });
    const again = await gateway.send(sender, { kind: 'SEND', to: 'r', text: 'once', idempotencyKey: 'k1' });
    expect(again).toMatchObject({ msgId: first.msgId, duplicate: true, traceId: first.traceId });
    expect(gateway.roster().find((e) => e.name === 'r')?.depth).toBe(1);
  });
});
