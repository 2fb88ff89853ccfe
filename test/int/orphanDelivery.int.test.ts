import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { loadConfig } from '../../src/config/loadConfig.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { createLogger } from '../../src/log/logger.js';
import { deliveryActorId } from '../../src/store/actorIds.js';
import { RecordingPane } from '../support/RecordingPane.js';

let home: string;
let lines: Array<Record<string, unknown>>;

beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), 'bridge-orphan-int-'));
  lines = [];
});
afterEach(() => {
  rmSync(home, { recursive: true, force: true });
});

function boot(): Gateway {
  const clock = new SimulatedClock();
  clock.set(1_700_000_000_000);
  const { config } = loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'h1' } });
  const logger = createLogger({
    level: 'info',
    host: 'h1',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  });
  return new Gateway({ config, logger, clock, createInjector: () => new RecordingPane() });
}

it('a held message whose recipient is gone at start is dead-lettered recipient-gone, counted, logged and told to its sender', async () => {
  const first = boot();
  await first.start();
  const sender = await first.services.registrations.register({ kind: 'main', name: 'sender' });
  const recipient = await first.services.registrations.register({ kind: 'main', name: 'recipient' });
  const { msgId } = await first.services.sends.send(first.directory.authenticate(sender.token)!, {
    kind: 'SEND',
    to: 'recipient',
    text: 'held for a main that will be gone',
  });
  await first.stop();
  // The entity row goes while the gateway is down; its delivery is still live in the log.
  const db = new Database(join(home, 'events.db'));
  db.prepare('DELETE FROM entities WHERE gid = ?').run(recipient.gid);
  db.close();

  const gateway = boot();
  await gateway.start();
  try {
    await gateway.store.batch.flush();
    const metric = (await gateway.metrics.deadLetters.get()).values.find(
      (v) => v.labels.reason === 'recipient-gone',
    );
    expect(metric?.value).toBe(1);
    expect(lines.filter((l) => l.msg === 'message dead-lettered; its body is kept for the operator')).toEqual(
      [expect.objectContaining({ msgId, recipient: recipient.gid, reason: 'recipient-gone', level: 50 })],
    );
    const reader = new Database(join(home, 'events.db'), { readonly: true });
    const head = reader
      .prepare("SELECT state FROM actors WHERE actor_kind = 'delivery' AND actor_id = ?")
      .get(deliveryActorId(msgId, recipient.gid));
    reader.close();
    expect(head).toEqual({ state: 'dead-lettered' });
    // Its sender learns it too, as it would of any delivery of a departed entity (R-RC1).
    // (recorded on the send once it is rebuilt from the log, after this commit)
    const told = async () =>
      (await gateway.services.messageStatus(gateway.directory.authenticate(sender.token), msgId)).stages;
    for (let i = 0; i < 50 && (await told()).at(-1)?.stage !== 'dead-lettered'; i++)
      await gateway.store.batch.flush();
    expect((await told()).at(-1)).toMatchObject({ stage: 'dead-lettered', reason: 'recipient-gone' });
  } finally {
    await gateway.stop();
  }
});
