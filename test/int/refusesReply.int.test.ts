import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { Directory } from '../../src/deliver/Directory.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import type { Federation } from '../../src/federation/Federation.js';
import { systemClock } from '../../src/kernel/clock.js';
import { Lifecycle } from '../../src/kernel/Lifecycle.js';
import { readActorInput } from '../../src/kernel/readActorInput.js';
import { silentLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { Router } from '../../src/send/Router.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { type Envelope, WireKind } from '../../src/wire/envelope.js';
import { createHlc, encodeHlc } from '../../src/wire/hlc.js';

/**
 * A reply from the broker may name only a message that went to its sender (judgeReply). The
 * router answers from the send actor in memory, or, once that is gone (a restart, an evicted
 * cell), from the send's recorded input alone.
 */
describe('a reply naming a message this host sent, checked against the record', () => {
  let home: string;
  let store: Store;
  const bob = { gid: randomUUID(), name: 'bob', host: 'host-b', kind: 'main' as const };
  const eve = { gid: randomUUID(), name: 'eve', host: 'host-b', kind: 'main' as const };
  const lead = {
    gid: randomUUID(),
    record: { name: 'lead', kind: 'main' },
    touch: () => undefined,
  } as unknown as EntityActor;

  const routerOn = () =>
    new Router({
      lifecycle: new Lifecycle(),
      store,
      hlc: createHlc(() => Date.now()),
      clock: systemClock,
      host: 'host-a',
      logger: silentLogger(),
      config: loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'host-a' } }).config,
      metrics: createMetrics(() => []),
      directory: new Directory('host-a'),
      federation: {
        broker: { connected: true },
        roster: {
          find: (address: string) =>
            [bob, eve]
              .filter((e) => address === e.gid || address === `${e.name}@${e.host}`)
              .map((e) => ({ ...e, groups: [], status: 'idle' })),
          hostIds: () => [bob.host],
          filling: () => false,
        },
        publishMessage: () => Promise.resolve({ ok: true }),
      } as unknown as Federation,
    });
  const replyFrom = (from: typeof bob, inReplyTo: string): Envelope => ({
    v: '1.2',
    kind: WireKind.reply,
    msgId: randomUUID(),
    traceId: randomUUID(),
    hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
    from,
    to: lead.gid,
    text: 'my reply',
    inReplyTo,
  });

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-replied-'));
    store = openStore({ file: join(home, 'events.db') });
  });
  afterEach(async () => {
    await store.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('after a restart: the recipient may reply, anyone else is refused', async () => {
    const { msgId } = await routerOn().send(lead, { kind: WireKind.send, to: `bob@${bob.host}`, text: 'hi' });
    await store.batch.flush();
    const restarted = routerOn();
    expect(restarted.liveSend(msgId)).toBeUndefined();
    expect(restarted.refusesReply(replyFrom(bob, msgId))).toBeUndefined();
    expect(restarted.refusesReply(replyFrom(eve, msgId))).toMatch(
      new RegExp(`names message ${msgId}, which was sent to`),
    );
  });

  it('reads the recorded input of the send, and nothing for a message this host did not send', async () => {
    const { msgId, traceId } = await routerOn().send(lead, { kind: WireKind.send, to: bob.gid, text: 'hi' });
    await store.batch.flush();
    expect(readActorInput(store, 'send', msgId)).toMatchObject({
      msgId,
      traceId,
      kind: WireKind.send,
      sender: lead.gid,
      recipient: bob.gid,
      recipientHost: bob.host,
    });
    expect(readActorInput(store, 'send', randomUUID())).toBeUndefined();
  });
});
