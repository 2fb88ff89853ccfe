import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BrokerActor } from '../../src/federation/BrokerActor.js';
import { DeadLetters } from '../../src/federation/DeadLetters.js';
import {
  Exchange,
  inboxLockName,
  inboxLockSpec,
  inboxName,
  inboxSpec,
  QueueMode,
} from '../../src/federation/topology.js';
import { systemClock } from '../../src/kernel/clock.js';
import { silentLogger } from '../../src/log/logger.js';
import { createNoSigner } from '../../src/security/messageSigning.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { createHlc } from '../../src/wire/hlc.js';
import type { Receipt, ReceiptRoute } from '../../src/wire/receipt.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor } from '../support/brokerActor.js';
import { removeDeadLettersOf, testDeployment, waitFor } from '../support/federation.js';
import { sendEnvelope } from '../support/sendEnvelope.js';

/**
 * A removed entity's inbox is emptied into bridge.dlq (recipient-gone) through the broker
 * actor's own channel, then deleted with its lock queue: what was waiting in it is listed in
 * the DLQ afterwards, nothing is lost.
 */
// In quorum mode (R-TOP2) the inbox has a single active consumer, so basic.get is refused, and
// queue.delete with if-empty is not implemented for quorum queues (540 closes the connection).
describe.each([QueueMode.classic, QueueMode.quorum])(
  'dead letters: emptying a removed entity’s inbox (%s)',
  (mode) => {
    const hostId = uniqueHostId(`dlq-empty-${mode}`);
    const gid = randomUUID();
    let store: Store;
    let broker: BrokerActor;
    let deadLetters: DeadLetters;
    const fatal: unknown[] = [];
    /** The broker actor's states: emptying the inbox must not cost the connection. */
    const states: string[] = [];
    const told: Array<{ receipt: Receipt; route: ReceiptRoute }> = [];

    beforeAll(async () => {
      store = openStore({ file: ':memory:' });
      broker = createBrokerActor(hostId, store, {
        onFatal: (err) => void fatal.push(err),
        onState: (state) => void states.push(state),
      });
      // Paused: declared and bound, nothing delivered, so what is published stays in the inbox.
      await broker.consume({
        queue: inboxSpec({ deployment: testDeployment, gid, groups: [], mode, maxLength: 100 }),
        lock: inboxLockSpec(gid),
        prefetch: 1,
        exclusive: mode === QueueMode.classic,
        paused: true,
        onMessage: () => undefined,
      });
      await broker.start();
      await waitFor('the broker actor connected', () => (broker.connected ? true : undefined));
      deadLetters = new DeadLetters({
        broker,
        hostId,
        hlc: createHlc(() => systemClock.now()),
        clock: systemClock,
        logger: silentLogger(),
        signer: createNoSigner(hostId),
        store,
        queueMode: mode,
        receipts: { record: (receipt, route) => void told.push({ receipt, route }) },
        maxWireBytes: 64 * 1024,
      });
    });

    afterAll(async () => {
      await broker?.stop();
      await store?.close();
      await deleteQueues([inboxName(gid), inboxLockName(gid)]);
      await removeDeadLettersOf([hostId]);
    });

    it('moves every waiting message to the DLQ with its reason, then deletes the inbox; each sender is told', async () => {
      // Two messages from a sender on another host, and one that is no message at all.
      const sender = {
        gid: randomUUID(),
        name: 'far-main',
        host: uniqueHostId('far'),
        kind: 'main' as const,
      };
      const envelopes = [sendEnvelope(sender, gid), sendEnvelope(sender, gid)];
      const contents = [...envelopes.map((e) => JSON.stringify(e)), JSON.stringify({ msgId: randomUUID() })];
      const msgIds = [...envelopes.map((e) => e.msgId), JSON.parse(contents[2] as string).msgId as string];
      for (const [i, msgId] of msgIds.entries()) {
        const outcome = await broker.publish({
          exchange: Exchange.msg,
          routingKey: gid,
          content: Buffer.from(contents[i] as string),
          messageId: msgId,
          mandatory: true,
          persistent: true,
        });
        expect(outcome).toEqual({ ok: true });
      }
      await waitFor('three messages in the inbox', async () =>
        (await broker.queueDepth(inboxName(gid))) === 3 ? true : undefined,
      );
      await broker.cancel(inboxName(gid));
      const before = states.length;
      await deadLetters.emptyInbox(gid);
      expect(states.slice(before), 'the connection stayed up').toEqual([]);

      expect(await broker.queueDepth(inboxName(gid)), 'the inbox is gone').toBeUndefined();
      // bridge.dlq is the broker's, shared with the other tests: a letter another one's pass holds
      // at this moment (a list, a requeue: taken unacked, put back) is missing from this list.
      const letters = await waitFor('the three letters in bridge.dlq', async () => {
        const mine = (await deadLetters.list(10_000)).filter((letter) => msgIds.includes(letter.msgId ?? ''));
        return mine.length === msgIds.length ? mine : undefined;
      });
      expect(
        letters.map((letter) => [letter.msgId, letter.reason, letter.queue, letter.host]).sort(),
      ).toEqual(msgIds.map((msgId) => [msgId, 'recipient-gone', inboxName(gid), hostId]).sort());
      // Each message's sender gets the dead-lettered receipt (R-RC1); the one that is no message has none.
      expect(
        told.map(({ receipt, route }) => [
          receipt.msgId,
          receipt.stage,
          receipt.reason,
          receipt.recipient,
          route,
        ]),
      ).toEqual(
        envelopes.map((e) => [
          e.msgId,
          'dead-lettered',
          'recipient-gone',
          gid,
          { sender: sender.gid, senderHost: sender.host, traceId: e.traceId },
        ]),
      );
      expect(fatal).toEqual([]);
    });
  },
);
