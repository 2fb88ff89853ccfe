import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryActorId } from '../../src/store/actorIds.js';
import { encodeHlc } from '../../src/wire/hlc.js';
import { uniqueHostId } from '../support/broker.js';
import { withEventsDb } from '../support/eventsDb.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { waitFor } from '../support/waitFor.js';

interface Registered {
  gid: string;
  token: string;
}

/**
 * Issue: a record the gateway cannot fold bricks every restart. An entity whose actor log is
 * missing, a delivery and a turn whose logs do not start with their creation: each is logged
 * and left in the store for a post-mortem; the gateway starts and serves everyone else.
 */
describe('stored actors that no longer fold do not keep the gateway down', () => {
  let gateway: GatewayProcess;
  let keep: Registered;

  beforeAll(async () => {
    gateway = new GatewayProcess({ hostId: uniqueHostId('brokenStore') });
    await gateway.start();
    const registered = await gateway.cli(['register', '--kind', 'main', '--name', 'keep', '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    keep = JSON.parse(registered.stdout) as Registered;
    await gateway.stop();
  });

  afterAll(async () => {
    await gateway?.dispose();
  });

  it('an entity with no log, a delivery and a turn with broken logs: logged, left as they are; the rest start', async () => {
    const ghost = randomUUID();
    const msgId = randomUUID();
    const turnId = randomUUID();
    const hlc = encodeHlc({ wall: Date.now(), counter: 0 });
    withEventsDb(gateway.home, (db) => {
      db.prepare(
        `INSERT INTO entities (gid, name, kind, groups, pane, token_hash, created)
         VALUES (?, 'ghost', 'main', '[]', NULL, ?, ?)`,
      ).run(ghost, `sha256:${randomUUID()}`, new Date().toISOString());
      const event = db.prepare(
        `INSERT INTO events (hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data)
         VALUES (?, ?, ?, ?, ?, ?, 'delivery.injected', 'pending', 'nowhere', NULL)`,
      );
      const actor = db.prepare(
        'INSERT INTO actors (actor_kind, actor_id, owner, trace_id, state, done) VALUES (?, ?, ?, ?, ?, 0)',
      );
      event.run(hlc, gateway.hostId, 'delivery', deliveryActorId(msgId, keep.gid), msgId, msgId);
      actor.run('delivery', deliveryActorId(msgId, keep.gid), keep.gid, msgId, 'nowhere');
      event.run(hlc, gateway.hostId, 'turn', turnId, turnId, turnId);
      actor.run('turn', turnId, keep.gid, turnId, 'nowhere');
    });

    // Before, the start threw ("an actor's log must start with xstate.init") and the daemon died.
    await gateway.start();
    // The daemon's log reaches the test through a pipe: healthy can come before its last lines.
    const expected = [
      `delivery ${deliveryActorId(msgId, keep.gid)}`,
      `entity ${ghost}`,
      `turn ${turnId}`,
    ].sort();
    const reported = () =>
      gateway.log
        .split('\n')
        .filter((line) => line.includes('a stored actor does not fold into its machine'))
        .map((line) => JSON.parse(line) as { actor: string; id: string })
        .map((r) => `${r.actor} ${r.id}`)
        .sort();
    await waitFor('three reports of stored actors that do not fold', () =>
      reported().length >= expected.length ? true : undefined,
    ).catch(() => undefined);
    expect(reported()).toEqual(expected);
    const sent = await gateway.cli(['send', 'keep', 'still here', '--json'], { BRIDGE_TOKEN: keep.token });
    expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    const drained = await gateway.cli(['drain', '--json'], { BRIDGE_TOKEN: keep.token });
    expect(drained.code, drained.stderr || drained.stdout).toBe(0);
    expect(drained.stdout).toContain('still here');
    // Left in the store as they were, for `agentbridge replay`.
    const left = withEventsDb(gateway.home, (db) =>
      db
        .prepare('SELECT COUNT(*) AS n FROM actors WHERE actor_id IN (?, ?)')
        .get(deliveryActorId(msgId, keep.gid), turnId),
    ) as { n: number };
    expect(left.n).toBe(2);
  });
});
