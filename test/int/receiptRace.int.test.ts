import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { Directory } from '../../src/deliver/Directory.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import type { PublishOutcome } from '../../src/federation/brokerMessages.js';
import type { Federation } from '../../src/federation/Federation.js';
import { systemClock } from '../../src/kernel/clock.js';
import { Lifecycle } from '../../src/kernel/Lifecycle.js';
import { silentLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { ReceiptsArriving } from '../../src/send/ReceiptsArriving.js';
import { Router, type SendResult } from '../../src/send/Router.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { readActorEvents } from '../../src/store/readEvents.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { gatewayAddress } from '../../src/wire/gatewayAddress.js';
import { createHlc, encodeHlc } from '../../src/wire/hlc.js';

/**
 * The sender's side when a receipt overtakes the broker's confirm (the recipient's gateway can
 * be faster than the broker's fsync): the receipt waits until the send is confirmed, is then
 * recorded after it, and its RECEIPT is acked only once that is on disk. Real router, send
 * machine and SQLite log; the broker is a fake whose confirm the test releases.
 */
describe('a receipt that overtakes the confirm', () => {
  let home: string;
  let store: Store;
  let router: Router;
  let receipts: ReceiptsArriving;
  let confirm: (outcome: PublishOutcome) => void;
  const bob = { gid: randomUUID(), name: 'bob', host: 'host-b', kind: 'main' as const };
  const lead = {
    gid: randomUUID(),
    record: { name: 'lead', kind: 'main' },
    touch: () => undefined,
  } as unknown as EntityActor;

  const settle = async () => {
    for (let i = 0; i < 3; i++) {
      await store.batch.flush();
      await new Promise((r) => setImmediate(r));
    }
  };
  const trail = (msgId: string) =>
    readActorEvents(store, 'send', msgId).map((r) => `${r.event} → ${r.toState}`);
  const receiptFor = (msgId: string, traceId: string): Envelope => ({
    v: '1.2',
    kind: 'RECEIPT',
    msgId: randomUUID(),
    traceId,
    hlc: encodeHlc({ wall: Date.now(), counter: 0 }),
    from: gatewayAddress(bob.host),
    to: 'host-a',
    text: '',
    receipts: [{ msgId, recipient: bob.gid, stage: 'queued', at: Date.now() }],
  });

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-race-'));
    store = openStore({ file: join(home, 'events.db') });
    const { config } = loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'host-a' } });
    const metrics = createMetrics(() => []);
    const deps = {
      store,
      hlc: createHlc(() => Date.now()),
      clock: systemClock,
      host: 'host-a',
      logger: silentLogger(),
    };
    const federation = {
      broker: { connected: true },
      roster: {
        find: (address: string) =>
          address === bob.gid || address === `bob@${bob.host}`
            ? [{ ...bob, groups: [], status: 'active.idle' }]
            : [],
        hostIds: () => [bob.host],
        filling: () => false,
      },
      publishMessage: (): Promise<PublishOutcome> =>
        new Promise((resolve) => {
          confirm = resolve;
        }),
    } as unknown as Federation;
    router = new Router({
      ...deps,
      config,
      metrics,
      directory: new Directory('host-a'),
      federation,
      lifecycle: new Lifecycle(),
    });
    receipts = new ReceiptsArriving({ ...deps, metrics, router });
  });

  afterEach(async () => {
    await store.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('waits while the send is published, is recorded after the confirm, and is acked once on disk', async () => {
    let result: SendResult | undefined;
    const sending = router.send(lead, { kind: 'SEND', to: `bob@${bob.host}`, text: 'quick' }).then((r) => {
      result = r;
    });
    await settle();
    const sendId = store
      .prepare<[], { actor_id: string }>("SELECT actor_id FROM actors WHERE actor_kind = 'send'")
      .get()?.actor_id as string;
    const traceId = router.liveSend(sendId)?.context.traceId as string;
    expect(router.liveSend(sendId)?.state).toBe('published');

    let acked = 0;
    receipts.receive(receiptFor(sendId, traceId), {
      ack: () => void acked++,
      content: Buffer.alloc(0),
      headers: {},
    });
    await settle();
    expect(router.liveSend(sendId)?.state).toBe('published');
    expect(acked).toBe(0);

    confirm({ ok: true });
    await sending;
    await settle();
    expect(result?.msgId).toBe(sendId);
    expect(trail(sendId)).toEqual([
      'xstate.init → accepted',
      'send.published → published',
      'send.confirmed → confirmed',
      'send.receipt → queued',
    ]);
    expect(acked).toBe(1);
    // The send also names the recipient's host it went to (from the roster), for later checks.
    expect(router.liveSend(sendId)?.context.recipientHost).toBe(bob.host);
  });
});
