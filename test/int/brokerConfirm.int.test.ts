import { afterEach, describe, expect, it } from 'vitest';
import type { BrokerActor } from '../../src/actors/BrokerActor.js';
import { controlKey, controlSpec, Exchange } from '../../src/broker/topology.js';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor } from '../support/brokerActor.js';
import { waitFor } from '../support/federation.js';
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
    const received: string[] = [];
    for (const id of [hostId, `${hostId}-other`]) {
      queues.push(controlSpec(id).name);
      await broker.consume({
        queue: controlSpec(id),
        exclusive: true,
        prefetch: 10,
        onMessage: (message) => {
          received.push(message.content.toString());
          message.ack();
        },
      });
    }
    await broker.start();
    await waitFor('connected', () => (broker?.connected ? true : undefined));
    const publish = (to: string, text: string) =>
      (broker as BrokerActor).publish({
        exchange: Exchange.control,
        routingKey: controlKey(to),
        content: Buffer.from(text),
        messageId: `${to}/${text}`,
        mandatory: true,
        persistent: true,
      });
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
});
