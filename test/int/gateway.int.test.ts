import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { loadConfig } from '../../src/config/loadConfig.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { createLogger } from '../../src/log/logger.js';
import { RecordingPane } from '../support/RecordingPane.js';

// The send and delivery flows' cases run in memory (test/unit/gatewayFlows.unit.test.ts); here
// what needs the log as a file: one an older gateway left, migrated when it is opened.
describe('gateway in-process on an event log file (real SQLite, simulated clock)', () => {
  let home: string;
  let clock: SimulatedClock;
  let pane: RecordingPane;
  let gateway: Gateway;
  let logLines: Array<Record<string, unknown>>;
  const boot = async () => {
    const { config } = loadConfig({
      env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'h1' },
    });
    const gw = new Gateway({
      config: {
        ...config,
        delivery: { ...config.delivery, ttlMs: 60_000, maxAttempts: 3, retryBaseMs: 1_000 },
      },
      logger: createLogger({
        level: 'warn',
        destination: { write: (line: string) => void logLines.push(JSON.parse(line)) },
      }),
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
    pane = new RecordingPane();
    logLines = [];
    gateway = await boot();
  });
  afterEach(async () => {
    await gateway.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it('an idempotency key recorded before calls were kept (schema 2) still returns its first msgId', async () => {
    const main = await gateway.services.registrations.register({ kind: 'main', name: 'm' });
    await gateway.services.registrations.register({ kind: 'main', name: 'r' });
    await gateway.services.registrations.register({ kind: 'main', name: 'q' });
    const first = await gateway.services.sends.send(gateway.directory.authenticate(main.token)!, {
      kind: 'SEND',
      to: 'r',
      text: 'once',
      idempotencyKey: 'old',
    });
    await gateway.stop();
    // What an older gateway left: the key and its msgId only, and the schema before migration 3.
    const db = new Database(join(home, 'events.db'));
    db.exec('ALTER TABLE idempotency DROP COLUMN kind');
    db.exec('ALTER TABLE idempotency DROP COLUMN recipient');
    db.exec('ALTER TABLE idempotency DROP COLUMN digest');
    db.exec('DROP VIEW event_log');
    db.exec('ALTER TABLE events DROP COLUMN later');
    db.exec('ALTER TABLE events DROP COLUMN last_hlc');
    db.exec('ALTER TABLE messages DROP COLUMN wire');
    db.exec('ALTER TABLE messages DROP COLUMN wire_headers');
    db.exec('DROP TABLE dead_letter_outbox');
    db.pragma('user_version = 2');
    db.close();

    gateway = await boot();
    const sender = gateway.directory.authenticate(main.token)!;
    // It cannot tell a retry from another call: a retry it is, as it always was.
    const again = await gateway.services.sends.send(sender, {
      kind: 'SEND',
      to: 'q',
      text: 'twice',
      idempotencyKey: 'old',
    });
    expect(again).toMatchObject({ msgId: first.msgId, duplicate: true });
    expect(gateway.services.status.roster().find((e) => e.name === 'q')?.depth).toBe(0);
    // A key used after the upgrade has its call kept.
    await gateway.services.sends.send(sender, { kind: 'SEND', to: 'r', text: 'new', idempotencyKey: 'new' });
    await expect(
      gateway.services.sends.send(sender, { kind: 'SEND', to: 'q', text: 'new', idempotencyKey: 'new' }),
    ).rejects.toMatchObject({ code: 'IDEMPOTENCY_CONFLICT' });
    expect(events('SELECT key, kind IS NULL AS old FROM idempotency ORDER BY key')).toEqual([
      { key: 'new', old: 0 },
      { key: 'old', old: 1 },
    ]);
  });
});
