import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/loadConfig.js';
import { Directory } from '../../src/deliver/Directory.js';
import type { EntityActor } from '../../src/deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import type { PublishOutcome } from '../../src/federation/brokerMessages.js';
import type { Federation } from '../../src/federation/Federation.js';
import { Gateway } from '../../src/gateway/Gateway.js';
import { systemClock } from '../../src/kernel/clock.js';
import { Lifecycle } from '../../src/kernel/Lifecycle.js';
import { silentLogger } from '../../src/log/logger.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { Router } from '../../src/send/Router.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { type Envelope, WireKind } from '../../src/wire/envelope.js';
import { gatewayAddress } from '../../src/wire/gatewayAddress.js';
import { createHlc } from '../../src/wire/hlc.js';
import { receiptStages } from '../../src/wire/receipt.js';
import { RecordingPane } from '../support/RecordingPane.js';

/**
 * R-H2: the event log keeps digests and sizes, never a sent message's text once its send is
 * over. Each way a send ends (confirmed, every receipt stage after it, every way a publish
 * fails, a gateway notice to an entity that has left) is driven on a real router and send
 * machine over a SQLite file, then the `messages` table is read back. The broker is a fake
 * whose outcome each test sets.
 */
describe('a sent message leaves no body in the store, however its send ends', () => {
  let home: string;
  let store: Store;
  let router: Router;
  let outcome: () => Promise<PublishOutcome>;
  const published: Envelope[] = [];
  const bob = { gid: randomUUID(), name: 'bob', host: 'host-b', kind: 'main' as const };
  const lead = {
    gid: randomUUID(),
    record: { name: 'lead', kind: 'main' },
    touch: () => undefined,
  } as unknown as EntityActor;
  const deps = () => ({
    store,
    hlc: createHlc(() => Date.now()),
    clock: systemClock,
    host: 'host-a',
    logger: silentLogger(),
  });
  const config = () => loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'host-a' } }).config;

  const bodies = (msgId: string) =>
    store
      .prepare<[string], { recipient: string }>('SELECT recipient FROM messages WHERE msg_id = ?')
      .all(msgId);
  const stateOf = (msgId: string) =>
    store
      .prepare<[string], { state: string }>(
        "SELECT state FROM actors WHERE actor_kind = 'send' AND actor_id = ?",
      )
      .get(msgId)?.state;
  const sendToBob = (text: string, idempotencyKey?: string) =>
    router.send(lead, { kind: WireKind.send, to: `bob@${bob.host}`, text, idempotencyKey });
  /** The msgId of the one send actor this test made, whether its call returned or threw. */
  const onlySend = () =>
    store.prepare<[], { actor_id: string }>("SELECT actor_id FROM actors WHERE actor_kind = 'send'").get()
      ?.actor_id as string;

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-bodies-'));
    store = openStore({ file: join(home, 'events.db') });
    published.length = 0;
    outcome = () => Promise.resolve({ ok: true });
    const federation = {
      broker: { connected: true },
      roster: {
        find: (address: string) =>
          address === bob.gid || address === `bob@${bob.host}`
            ? [{ ...bob, groups: [], status: 'idle' }]
            : [],
        hostIds: () => [bob.host],
        filling: () => false,
      },
      publishMessage: (envelope: Envelope) => {
        published.push(envelope);
        return outcome();
      },
      deadLetter: () => undefined,
    } as unknown as Federation;
    router = new Router({
      lifecycle: new Lifecycle(),
      ...deps(),
      config: config(),
      metrics: createMetrics(() => []),
      directory: new Directory('host-a'),
      federation,
    });
  });

  afterEach(async () => {
    await store.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('confirmed by the broker', async () => {
    const { msgId } = await sendToBob('confirmed text');
    await store.batch.flush();
    expect(stateOf(msgId)).toBe('confirmed');
    expect(bodies(msgId)).toEqual([]);
  });

  it.each(receiptStages)('confirmed, then a receipt says %s', async (stage) => {
    const { msgId } = await sendToBob(`text that ends ${stage}`);
    const cell = await router.loadSend(msgId);
    cell?.send({ type: 'send.receipt', stage, recipient: bob.gid, at: Date.now() });
    await store.batch.flush();
    expect(stateOf(msgId)).toBe(stage);
    expect(bodies(msgId)).toEqual([]);
  });

  it.each([
    [
      'the broker is unreachable',
      () => Promise.reject(new BridgeError(ErrorCode.brokerUnavailable, 'broker down')),
    ],
    [
      'no inbox takes it (unroutable)',
      () => Promise.resolve({ ok: false, reason: 'unroutable', detail: 'NO_ROUTE' }),
    ],
    [
      'the inbox is full (nacked)',
      () => Promise.resolve({ ok: false, reason: 'rejected', detail: 'maxlen' }),
    ],
  ] as const)('failed: %s', async (_label, fail) => {
    outcome = fail as () => Promise<PublishOutcome>;
    await expect(sendToBob('text that never left')).rejects.toBeInstanceOf(BridgeError);
    await store.batch.flush();
    const msgId = onlySend();
    expect(stateOf(msgId)).toBe('failed');
    expect(bodies(msgId)).toEqual([]);
  });

  it('failed, then a receipt says it got through after all', async () => {
    outcome = () =>
      Promise.reject(new BridgeError(ErrorCode.brokerUnavailable, 'dropped before the confirm'));
    await expect(sendToBob('text that got through')).rejects.toBeInstanceOf(BridgeError);
    const msgId = onlySend();
    const cell = await router.loadSend(msgId);
    cell?.send({ type: 'send.receipt', stage: 'handed-over', recipient: bob.gid, at: Date.now() });
    await store.batch.flush();
    expect(stateOf(msgId)).toBe('handed-over');
    expect(bodies(msgId)).toEqual([]);
  });

  it('a keyed retry of a failed send publishes the same message again, and keeps no body either', async () => {
    outcome = () => Promise.reject(new BridgeError(ErrorCode.brokerUnavailable, 'broker down'));
    await expect(sendToBob('retried text', 'k1')).rejects.toBeInstanceOf(BridgeError);
    outcome = () => Promise.resolve({ ok: true });
    const again = await sendToBob('retried text', 'k1');
    await store.batch.flush();
    expect(again.duplicate).toBe(true);
    expect(published.map((e) => [e.msgId, e.traceId, e.text, e.from.gid, e.to])).toEqual([
      [again.msgId, again.traceId, 'retried text', lead.gid, bob.gid],
      [again.msgId, again.traceId, 'retried text', lead.gid, bob.gid],
    ]);
    expect(stateOf(again.msgId)).toBe('confirmed');
    expect(bodies(again.msgId)).toEqual([]);
  });

  it('a broadcast nobody receives (failed)', async () => {
    outcome = () => Promise.resolve({ ok: false, reason: 'unroutable', detail: 'NO_ROUTE' });
    await expect(router.broadcast(lead, { text: 'anyone?', group: 'nobody' })).rejects.toBeInstanceOf(
      BridgeError,
    );
    await store.batch.flush();
    const msgId = onlySend();
    expect(stateOf(msgId)).toBe('failed');
    expect(bodies(msgId)).toEqual([]);
  });

  it('a SPAWN the broker could not take (failed)', async () => {
    outcome = () => Promise.reject(new BridgeError(ErrorCode.brokerUnavailable, 'broker down'));
    const request = router.compose(gatewayAddress('host-a'), WireKind.spawn, 'host-b', 'the brief, in full');
    await expect(router.sendControl(request, 'host-b')).rejects.toBeInstanceOf(BridgeError);
    await store.batch.flush();
    expect(stateOf(request.msgId)).toBe('failed');
    expect(bodies(request.msgId)).toEqual([]);
  });

  // Single-host mode: no broker, and the notice's recipient is no longer on this host.
  it.each([WireKind.tooLate, WireKind.spawnResult])(
    'a %s notice to an entity that has left ends failed, not accepted',
    async (kind) => {
      const alone = new Router({
        lifecycle: new Lifecycle(),
        ...deps(),
        config: config(),
        metrics: createMetrics(() => []),
        directory: new Directory('host-a'),
      });
      const notice = alone.compose(gatewayAddress('host-a'), kind, randomUUID(), 'a notice for someone gone');
      const refused: unknown = await alone.routeEnvelope(notice).then(
        () => undefined,
        (err: unknown) => err,
      );
      await store.batch.flush();
      expect(stateOf(notice.msgId)).toBe('failed');
      expect(bodies(notice.msgId)).toEqual([]);
      expect(refused).toMatchObject({ code: ErrorCode.unknownRecipient });
    },
  );
});

/** The same, single-host: a real gateway hands the message to its recipient without a broker. */
describe('a message routed on this host leaves no body once its send is over', () => {
  let home: string;
  let gateway: Gateway;
  const bodies = (msgId: string) => {
    const db = new Database(join(home, 'events.db'), { readonly: true });
    try {
      return db.prepare('SELECT recipient FROM messages WHERE msg_id = ?').all(msgId);
    } finally {
      db.close();
    }
  };
  const sendState = (msgId: string) => {
    const db = new Database(join(home, 'events.db'), { readonly: true });
    try {
      return (
        db.prepare("SELECT state FROM actors WHERE actor_kind = 'send' AND actor_id = ?").get(msgId) as
          | { state: string }
          | undefined
      )?.state;
    } finally {
      db.close();
    }
  };

  beforeEach(async () => {
    home = mkdtempSync(join(tmpdir(), 'bridge-bodies-local-'));
    const { config } = loadConfig({ env: { BRIDGE_HOME: home, BRIDGE_HOST_ID: 'h1' } });
    gateway = new Gateway({
      config: {
        ...config,
        broker: { ...config.broker, inboxMaxLength: 1 },
        limits: { ...config.limits, senderInboxShare: 1 },
      },
      logger: silentLogger(),
      createInjector: () => new RecordingPane(),
    });
    await gateway.start();
  });
  afterEach(async () => {
    await gateway.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it('routed-local, then handed over by a drain: the inbox copy goes with the delivery', async () => {
    const sink = await gateway.services.registrations.register({ kind: 'main', name: 'sink' });
    const lead = await gateway.services.registrations.register({ kind: 'main', name: 'lead' });
    const { msgId } = await gateway.services.sends.send(gateway.directory.authenticate(lead.token)!, {
      kind: 'SEND',
      to: 'sink',
      text: 'kept until drained',
    });
    await gateway.store.batch.flush();
    expect(sendState(msgId)).toBe('queued');
    expect(bodies(msgId)).toEqual([{ recipient: sink.gid }]);
    (await gateway.services.drains.drain(gateway.directory.authenticate(sink.token)!)).confirm();
    await gateway.store.batch.flush();
    expect(sendState(msgId)).toBe('handed-over');
    expect(bodies(msgId)).toEqual([]);
  });

  it('failed: the recipient’s inbox is full', async () => {
    await gateway.services.registrations.register({ kind: 'main', name: 'sink' });
    const lead = gateway.directory.authenticate(
      (await gateway.services.registrations.register({ kind: 'main', name: 'lead' })).token,
    )!;
    await gateway.services.sends.send(lead, { kind: 'SEND', to: 'sink', text: 'fills the inbox' });
    await expect(
      gateway.services.sends.send(lead, { kind: 'SEND', to: 'sink', text: 'one too many' }),
    ).rejects.toMatchObject({
      code: ErrorCode.inboxFull,
    });
    await gateway.store.batch.flush();
    const db = new Database(join(home, 'events.db'), { readonly: true });
    const refused = db
      .prepare("SELECT actor_id FROM actors WHERE actor_kind = 'send' AND state = 'failed'")
      .all() as Array<{ actor_id: string }>;
    db.close();
    expect(refused).toHaveLength(1);
    expect(bodies(refused[0]?.actor_id as string)).toEqual([]);
  });
});
