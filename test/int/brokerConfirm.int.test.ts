import amqp from 'amqplib';
import { afterEach, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import type { BrokerActor } from '../../src/federation/BrokerActor.js';
import { controlKey, controlSpec } from '../../src/federation/topology.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor, publishControl } from '../support/brokerActor.js';
import { brokerUri, waitFor } from '../support/federation.js';
import { TcpForwarder } from '../support/netns.js';

const confirmTimeoutMs = 400;

/**
 * A broker that keeps the connection and confirms nothing (as a cluster that lost its majority
 * does with quorum-queue publishes; here a forwarder withholds the broker's answers): a send
 * fails as BROKER_UNAVAILABLE after broker.confirmTimeoutMs instead of waiting for the broker,
 * later sends to the same recipient fail at once, and the broker answering frees it again.
 */
describe('broker actor: publishes the broker does not confirm', () => {
  let store: Store | undefined;
  let broker: BrokerActor | undefined;
  let forwarder: TcpForwarder | undefined;
  const queues: string[] = [];

  afterEach(async () => {
    forwarder?.release();
    await broker?.stop();
    await store?.close();
    await forwarder?.close();
    await deleteQueues(queues.splice(0));
  });

  /** Consumes the control queues of `ids` on `actor` and starts it; what arrives goes in the list. */
  const consumeAndStart = async (actor: BrokerActor, ids: readonly string[]): Promise<string[]> => {
    const received: string[] = [];
    for (const id of ids) {
      queues.push(controlSpec(id).name);
      await actor.consume({
        queue: controlSpec(id),
        exclusive: true,
        prefetch: 10,
        onMessage: (message) => {
          received.push(message.content.toString());
          message.ack();
        },
      });
    }
    await actor.start();
    await waitFor('connected', () => (actor.connected ? true : undefined));
    return received;
  };

  it('fails a publish left unconfirmed after the timeout, then every later one to that key at once, until the broker answers', async () => {
    const hostId = uniqueHostId('confirm');
    forwarder = await TcpForwarder.start('127.0.0.1', 0, '127.0.0.1', 5672);
    store = openStore({ file: ':memory:' });
    broker = createBrokerActor(hostId, store, {
      uris: [`amqp://guest:guest@127.0.0.1:${forwarder.port}`],
      confirmTimeoutMs,
      // The withheld heartbeats would end the connection after two beats: not within this test.
      heartbeatSeconds: 30,
      onFatal: (err) => expect.fail(err.message),
    });
    const received = await consumeAndStart(broker, [hostId, `${hostId}-other`]);
    const publish = (to: string, text: string) => publishControl(broker as BrokerActor, to, text);
    const failure = async (to: string, text: string) => {
      const started = Date.now();
      const err = await publish(to, text).then(
        (outcome) => expect.fail(`published: ${JSON.stringify(outcome)}`),
        (e: unknown) => e,
      );
      return { err: err as BridgeError, ms: Date.now() - started };
    };
    expect(await publish(hostId, 'before')).toEqual({ ok: true });

    forwarder.hold();
    const first = await failure(hostId, 'held');
    expect(first.err).toBeInstanceOf(BridgeError);
    expect(first.err.code).toBe(ErrorCode.brokerUnavailable);
    expect(first.err.retryable).toBe(true);
    expect(first.err.message).toMatch(
      new RegExp(
        `has not confirmed the message to ${controlKey(hostId)} for 0\\.4 s .*retry later with the same idempotency_key`,
      ),
    );
    expect(first.ms).toBeGreaterThanOrEqual(confirmTimeoutMs - 20);
    expect(first.ms).toBeLessThan(confirmTimeoutMs + 2_000);
    // The recipient is known to be stuck: the next send to it does not wait again.
    const second = await failure(hostId, 'after');
    expect(second.err.code).toBe(ErrorCode.brokerUnavailable);
    expect(second.err.message).toMatch(/has not confirmed an earlier message to/);
    expect(second.ms).toBeLessThan(100);
    expect(broker.unconfirmedKeys()).toEqual([controlKey(hostId)]);
    // Another recipient is not refused at once: its own publish waits for its own confirm.
    const other = await failure(`${hostId}-other`, 'held');
    expect(other.ms).toBeGreaterThanOrEqual(confirmTimeoutMs - 20);
    expect(broker.unconfirmedKeys().sort()).toEqual(
      [controlKey(hostId), controlKey(`${hostId}-other`)].sort(),
    );

    // The broker answers: what it took was delivered, and the recipients are free again.
    forwarder.release();
    await waitFor('the late confirms', () => (broker?.unconfirmedKeys().length === 0 ? true : undefined));
    expect(broker.connected).toBe(true);
    expect(await publish(hostId, 'again')).toEqual({ ok: true });
    await waitFor('every message taken', () => (received.length === 4 ? true : undefined));
    expect(received).toEqual(['before', 'held', 'held', 'again']);
  });

  it('moves publishing to a new channel on request: the old one closes without a reconnect, and a second request within the interval is skipped', async () => {
    const hostId = uniqueHostId('renew');
    store = openStore({ file: ':memory:' });
    broker = createBrokerActor(hostId, store, { onFatal: (err) => expect.fail(err.message) });
    const received = await consumeAndStart(broker, [hostId]);
    const publish = (text: string) => publishControl(broker as BrokerActor, hostId, text);
    const events = (type: string) =>
      (
        store!.db
          .prepare("SELECT count(*) AS n FROM event_log WHERE actor_kind = 'broker' AND event = ?")
          .get(type) as { n: number }
      ).n;
    expect(await publish('before')).toEqual({ ok: true });
    const inFlight = publish('during');
    await broker.renewPublishChannel(60_000);
    await broker.renewPublishChannel(60_000); // within the interval: nothing
    expect(await inFlight).toEqual({ ok: true });
    expect(await publish('after')).toEqual({ ok: true });
    await waitFor('every message taken', () => (received.length === 3 ? true : undefined));
    expect(received).toEqual(['before', 'during', 'after']);
    // The old channel closed once its publish was answered: not a loss of the connection.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(broker.connected).toBe(true);
    expect(events('broker.lost')).toBe(0);
    expect(events('broker.connected')).toBe(1);
  });

  it('a nack that comes back on a channel just replaced is still the broker refusing the message, not the channel closing', async () => {
    const hostId = uniqueHostId('renew-nack');
    store = openStore({ file: ':memory:' });
    broker = createBrokerActor(hostId, store, { onFatal: (err) => expect.fail(err.message) });
    await consumeAndStart(broker, [hostId]);
    // A queue that takes nothing: every publish to it is nacked (reject-publish at length 0).
    const full = `${hostId}.full`;
    queues.push(full);
    const connection = await amqp.connect(brokerUri);
    try {
      const channel = await connection.createChannel();
      await channel.assertQueue(full, { arguments: { 'x-max-length': 0, 'x-overflow': 'reject-publish' } });
    } finally {
      await connection.close();
    }
    const refused = broker.publish({
      exchange: '',
      routingKey: full,
      content: Buffer.from('x'),
      messageId: `${full}/x`,
      mandatory: true,
      persistent: true,
    });
    // Replaced before the nack's settling beat is over.
    await broker.renewPublishChannel(0);
    expect(await refused).toMatchObject({ ok: false, reason: 'rejected' });
  });
});
