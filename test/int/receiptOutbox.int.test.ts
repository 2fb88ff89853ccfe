import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PublishOutcome } from '../../src/federation/brokerMessages.js';
import type { Federation } from '../../src/federation/Federation.js';
import { systemClock } from '../../src/kernel/clock.js';
import { silentLogger } from '../../src/log/logger.js';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js';
import { ReceiptsArriving } from '../../src/send/ReceiptsArriving.js';
import { ReceiptsLeaving } from '../../src/send/ReceiptsLeaving.js';
import type { Router } from '../../src/send/Router.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { putOutboxReceipt, readOutboxReceipts } from '../../src/store/receiptOutbox.js';
import { decodeEnvelope, encodeEnvelope } from '../../src/wire/codec.js';
import type { Envelope } from '../../src/wire/envelope.js';
import { createHlc } from '../../src/wire/hlc.js';
import type { Receipt, ReceiptRoute } from '../../src/wire/receipt.js';

/** One publish the receipts actor made, and how the test answers it. */
interface Published {
  envelope: Envelope;
  routingKey: string;
  exchange: string;
  settle: (outcome: PublishOutcome | Error) => void;
}

/**
 * The recipient's side of receipts (R-RC1) on a real SQLite event log (file, writer thread):
 * the outbox row is written with the tick's transitions and holds the furthest stage, one
 * publish per tick per delivery, deleted on the broker's confirm only if it still holds that
 * stage, kept while the broker is away and published again on reconnect, deleted when the
 * sender's gateway is gone. The broker is a fake that the test answers by hand.
 */
describe('receipt outbox (recipient side)', () => {
  let home: string;
  let store: Store;
  let metrics: Metrics;
  let receipts: ReceiptsLeaving;
  let connected: boolean;
  let published: Published[];

  const host = 'host-b';
  const senderHost = 'host-a';
  const msgId = () => randomUUID();
  const recipient = randomUUID();
  const route: ReceiptRoute = { sender: randomUUID(), senderHost, traceId: 'trace-outbox' };
  const receipt = (id: string, stage: Receipt['stage'], extra: Partial<Receipt> = {}): Receipt => ({
    msgId: id,
    recipient,
    stage,
    at: Date.now(),
    ...extra,
  });
  /** Lets the tick's microtask and the batch's commit (and effects after it) run. */
  const settle = async () => {
    for (let i = 0; i < 3; i++) {
      await store.batch.flush();
      await new Promise((r) => setImmediate(r));
    }
  };
  const rows = () => readOutboxReceipts(store).map((e) => `${e.receipt.msgId}:${e.receipt.stage}`);
  const count = async (outcome: string) =>
    (await metrics.receipts.get()).values.find((v) => v.labels.outcome === outcome)?.value ?? 0;

  /** The receipts actor on the current store, with the fake broker; no gathering window unless asked. */
  const build = (gatherMs = 0): ReceiptsLeaving => {
    const federation = {
      broker: {
        get connected() {
          return connected;
        },
      },
      roster: { find: () => [] },
      publishMessage(envelope: Envelope, routingKey: string, exchange: string): Promise<PublishOutcome> {
        if (!connected) return Promise.reject(new Error('BROKER_UNAVAILABLE'));
        // What goes on the wire must decode as a RECEIPT.
        const decoded = decodeEnvelope(encodeEnvelope(envelope), 1 << 20);
        if (!decoded.ok) throw new Error(`not a valid envelope: ${decoded.detail}`);
        return new Promise((resolve, reject) => {
          published.push({
            envelope: decoded.envelope,
            routingKey,
            exchange,
            settle: (outcome) => (outcome instanceof Error ? reject(outcome) : resolve(outcome)),
          });
        });
      },
    } as unknown as Federation;
    const router = {
      liveSend: () => undefined,
      loadSend: async () => undefined,
      hostOf: () => undefined,
    } as unknown as Router;
    const deps = {
      store,
      hlc: createHlc(() => Date.now()),
      clock: systemClock,
      host,
      logger: silentLogger(),
      metrics,
      router,
    };
    return new ReceiptsLeaving({ ...deps, federation, gatherMs, arriving: new ReceiptsArriving(deps) });
  };

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bridge-outbox-'));
    store = openStore({ file: join(home, 'events.db') });
    metrics = createMetrics(() => []);
    connected = true;
    published = [];
    receipts = build();
  });

  afterEach(async () => {
    await store.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('several stages in one tick: one row with the furthest, one publish of it, deleted on confirm', async () => {
    const id = msgId();
    receipts.record(receipt(id, 'queued'), route);
    receipts.record(receipt(id, 'handed-over'), route);
    receipts.record(receipt(id, 'queued'), route); // a stale one in the same tick changes nothing
    await settle();
    expect(rows()).toEqual([`${id}:handed-over`]);
    expect(published).toHaveLength(1);
    const [first] = published as [Published];
    expect(first.exchange).toBe('control');
    expect(first.routingKey).toBe(senderHost);
    expect(first.envelope).toMatchObject({
      kind: 'RECEIPT',
      to: senderHost,
      traceId: 'trace-outbox',
      text: '',
      from: { name: 'gateway', host },
      receipts: [{ msgId: id, recipient, stage: 'handed-over' }],
    });
    first.settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
    expect(await count('sent')).toBe(1);
  });

  it('a later stage while the earlier is in flight: the confirm of the earlier leaves the row', async () => {
    const id = msgId();
    receipts.record(receipt(id, 'queued'), route);
    await settle();
    expect(published.map((p) => p.envelope.receipts?.map((r) => r.stage))).toEqual([['queued']]);
    receipts.record(receipt(id, 'dead-lettered', { reason: 'expired', detail: 'held too long' }), route);
    await settle();
    expect(published.map((p) => p.envelope.receipts?.map((r) => r.stage))).toEqual([
      ['queued'],
      ['dead-lettered'],
    ]);
    (published[0] as Published).settle({ ok: true });
    await settle();
    expect(rows()).toEqual([`${id}:dead-lettered`]);
    (published[1] as Published).settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
    expect((published[1] as Published).envelope.receipts?.[0]).toMatchObject({
      reason: 'expired',
      detail: 'held too long',
    });
  });

  it('the broker away: rows wait, and go out (once each) when it is back', async () => {
    connected = false;
    const [one, two] = [msgId(), msgId()];
    receipts.record(receipt(one, 'queued'), route);
    receipts.record(receipt(two, 'submitted'), route);
    await settle();
    expect(published).toEqual([]);
    expect(rows().sort()).toEqual([`${one}:queued`, `${two}:submitted`].sort());

    connected = true;
    receipts.republish();
    receipts.republish(); // a second "connected" while the first publishes sends nothing twice
    await settle();
    // One RECEIPT for the host, carrying both.
    expect(published).toHaveLength(1);
    expect(published[0]?.envelope.receipts?.map((r) => r.msgId).sort()).toEqual([one, two].sort());
    for (const p of published) p.settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
  });

  it('a publish that fails mid-way (connection lost before the confirm) keeps the row for the reconnect', async () => {
    const id = msgId();
    receipts.record(receipt(id, 'queued'), route);
    await settle();
    (published[0] as Published).settle(new Error('BROKER_UNAVAILABLE'));
    await settle();
    expect(rows()).toEqual([`${id}:queued`]);
    receipts.republish();
    await settle();
    expect(published).toHaveLength(2);
    (published[1] as Published).settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
  });

  it("unroutable (no control.<host>: the sender's gateway is gone): the row is deleted and counted", async () => {
    const id = msgId();
    receipts.record(receipt(id, 'queued'), route);
    await settle();
    (published[0] as Published).settle({ ok: false, reason: 'unroutable', detail: 'no queue is bound' });
    await settle();
    expect(rows()).toEqual([]);
    expect(await count('unroutable')).toBe(1);
  });

  it('rows survive a restart of the store and are published by the next republish', async () => {
    connected = false;
    const id = msgId();
    receipts.record(receipt(id, 'handed-over'), route);
    await settle();
    await store.close();
    store = openStore({ file: join(home, 'events.db') });
    expect(rows()).toEqual([`${id}:handed-over`]);
    connected = true;
    receipts = build();
    receipts.start(); // rows for other hosts wait for the broker…
    await settle();
    expect(published).toEqual([]);
    receipts.republish(); // …which is back
    await settle();
    expect(published.map((p) => p.envelope.receipts)).toMatchObject([[{ msgId: id, stage: 'handed-over' }]]);
    (published[0] as Published).settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
  });

  it('the row only moves forward: an earlier stage written later does not replace a later one', async () => {
    const id = msgId();
    putOutboxReceipt(store, {
      receipt: receipt(id, 'submitted'),
      sender: route.sender,
      senderHost,
      traceId: 't',
    });
    putOutboxReceipt(store, {
      receipt: receipt(id, 'queued'),
      sender: route.sender,
      senderHost,
      traceId: 't',
    });
    putOutboxReceipt(store, {
      receipt: receipt(id, 'typed'),
      sender: route.sender,
      senderHost,
      traceId: 't',
    });
    await store.batch.flush();
    expect(rows()).toEqual([`${id}:submitted`]);
  });

  it('a commit’s receipts go out as one RECEIPT per host, at most 64 or 12 KiB each; each row is dropped on its confirm', async () => {
    const elsewhere: ReceiptRoute = { ...route, senderHost: 'host-c' };
    const ids = Array.from({ length: 150 }, () => msgId());
    for (const [i, id] of ids.entries()) {
      // Some with the longest detail a receipt has, so that bytes, not the count, cut some batches.
      const detail = i % 10 === 0 ? 'x'.repeat(500) : undefined;
      receipts.record(receipt(id, 'queued', detail ? { detail } : {}), i % 3 === 0 ? elsewhere : route);
    }
    await settle();
    const sizes = published.map((p) => encodeEnvelope(p.envelope).length);
    expect(published.every((p) => (p.envelope.receipts?.length ?? 0) <= 64)).toBe(true);
    expect(Math.max(...sizes)).toBeLessThan(16 * 1024);
    expect(published.flatMap((p) => p.envelope.receipts?.map((r) => r.msgId) ?? []).sort()).toEqual(
      [...ids].sort(),
    );
    for (const p of published) expect(p.envelope.receipts?.length).toBeGreaterThan(0);
    expect(new Set(published.map((p) => `${p.routingKey}=${p.envelope.to}`))).toEqual(
      new Set([`${senderHost}=${senderHost}`, 'host-c=host-c']),
    );
    expect(published.length).toBeLessThan(10);
    for (const p of published) p.settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
    expect(await count('sent')).toBe(150);
  });

  it('receipts of several commits within the gathering window share one RECEIPT; a message queued and drained in it is told once, handed-over', async () => {
    receipts = build(80);
    const [drained, waiting] = [msgId(), msgId()];
    receipts.record(receipt(drained, 'queued'), route);
    await settle(); // committed: gathering
    receipts.record(receipt(waiting, 'queued'), route);
    await settle();
    receipts.record(receipt(drained, 'handed-over'), route);
    await settle();
    expect(published).toEqual([]);
    expect(rows().sort()).toEqual([`${drained}:handed-over`, `${waiting}:queued`].sort());
    await new Promise((r) => setTimeout(r, 120));
    expect(published).toHaveLength(1);
    expect(published[0]?.envelope.receipts?.map((r) => `${r.msgId}:${r.stage}`).sort()).toEqual(
      [`${drained}:handed-over`, `${waiting}:queued`].sort(),
    );
    published[0]?.settle({ ok: true });
    await settle();
    expect(rows()).toEqual([]);
  });

  it('a receipt whose route is lost (no envelope, no body, no roster entry) is dropped and counted', async () => {
    receipts.record(receipt(msgId(), 'queued'), { ...route, senderHost: undefined });
    await settle();
    expect(rows()).toEqual([]);
    expect(published).toEqual([]);
    expect(await count('no-route')).toBe(1);
  });
});
