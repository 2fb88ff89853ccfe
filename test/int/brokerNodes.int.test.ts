import amqp from 'amqplib';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/errors.js';
import type { BrokerActor } from '../../src/federation/BrokerActor.js';
import type { InboundMessage } from '../../src/federation/brokerMessages.js';
import {
  controlLockSpec,
  controlSpec,
  inboxLockSpec,
  inboxSpec,
  QueueMode,
} from '../../src/federation/topology.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor, publishControl } from '../support/brokerActor.js';
import { brokerUri, testDeployment, waitFor } from '../support/federation.js';
import { TcpForwarder } from '../support/netns.js';

/**
 * Several broker nodes (R-TOP3), each here a TCP forwarder of its own in front of the test
 * broker: closing one drops its connections and refuses new ones, as a node that died would.
 * The cluster itself, with quorum queues and real node kills, is the chaos suite's.
 */
describe('broker actor: several nodes, one at a time', () => {
  let store: Store | undefined;
  let broker: BrokerActor | undefined;
  const forwarders: TcpForwarder[] = [];
  const queues: string[] = [];

  afterEach(async () => {
    await broker?.stop();
    await store?.close();
    for (const forwarder of forwarders.splice(0)) await forwarder.close();
    await deleteQueues(queues.splice(0));
  });

  const node = async (): Promise<{ forwarder: TcpForwarder; uri: string }> => {
    const forwarder = await TcpForwarder.start('127.0.0.1', 0, '127.0.0.1', 5672);
    forwarders.push(forwarder);
    return { forwarder, uri: `amqp://guest:guest@127.0.0.1:${forwarder.port}` };
  };

  const consumeControl = async (hostId: string, received: string[]): Promise<void> => {
    const queue = controlSpec(hostId);
    queues.push(queue.name);
    await broker?.consume({
      queue,
      exclusive: true,
      prefetch: 10,
      onMessage: (message: InboundMessage) => {
        received.push(message.content.toString());
        message.ack();
      },
    });
  };

  const publishTo = (hostId: string, text: string) => publishControl(broker as BrokerActor, hostId, text);

  it('on loss of its node it moves to the next, re-opens its consumers, and shows each node', async () => {
    const hostId = uniqueHostId('nodes');
    const [first, second] = [await node(), await node()];
    store = openStore({ file: ':memory:' });
    const fatal: unknown[] = [];
    broker = createBrokerActor(hostId, store, {
      uris: [first.uri, second.uri],
      firstNode: 0,
      retryBaseMs: 5_000, // a node's own backoff: the move to the other does not wait for it
      onFatal: (err) => void fatal.push(err),
    });
    const received: string[] = [];
    await consumeControl(hostId, received);
    await broker.start();
    await waitFor('connected to the first node', () => (broker?.connected ? true : undefined));
    expect(broker.currentNode).toBe(`amqp://guest:***@127.0.0.1:${first.forwarder.port}`);
    expect(await publishTo(hostId, 'one')).toEqual({ ok: true });
    await waitFor('the first message', () => (received.includes('one') ? true : undefined));

    const firstNode = `amqp://guest:***@127.0.0.1:${first.forwarder.port}`;
    const lostAt = Date.now();
    await first.forwarder.close();
    const secondNode = `amqp://guest:***@127.0.0.1:${second.forwarder.port}`;
    await waitFor('connected to the second node, consuming again', () =>
      broker?.currentNode === secondNode && broker.connected && broker.consuming(controlSpec(hostId).name)
        ? true
        : undefined,
    );
    const movedInMs = Date.now() - lostAt;
    expect(movedInMs, 'it did not wait out the lost node’s 5 s backoff').toBeLessThan(4_000);
    expect(broker.nodeStates()).toMatchObject([
      { node: firstNode, state: 'failing', failures: 1 },
      { node: secondNode, state: 'connected', failures: 0 },
    ]);
    expect(await publishTo(hostId, 'two')).toEqual({ ok: true });
    await waitFor('the message through the second node', () => (received.includes('two') ? true : undefined));
    // An ack on its way when the node went may be lost with it: the broker redelivers (at least
    // once; the gateway's msgId dedup takes the copy). Nothing is lost, order is kept.
    expect(received.filter((text, i) => received.indexOf(text) === i)).toEqual(['one', 'two']);
    expect(fatal).toEqual([]);
    console.info(`BROKER_NODES moved to the next node in ${movedInMs} ms`);
  });

  it('opens its extra consumer connections to its own node, and moves them with it', async () => {
    const hostId = uniqueHostId('nodes');
    const [first, second] = [await node(), await node()];
    store = openStore({ file: ':memory:' });
    const fatal: unknown[] = [];
    broker = createBrokerActor(hostId, store, {
      uris: [first.uri, second.uri],
      firstNode: 0,
      retryBaseMs: 5_000,
      onFatal: (err) => void fatal.push(err),
      // One consumer a channel, one channel a connection: each consumer needs a connection.
      consumersPerChannel: 1,
      channelsPerConnection: 1,
    });
    const received: string[] = [];
    await consumeControl(hostId, received);
    const inbox = inboxSpec({
      deployment: testDeployment,
      gid: `${hostId}-e`,
      groups: [],
      mode: QueueMode.classic,
      maxLength: 10,
    });
    queues.push(inbox.name);
    await broker.consume({
      queue: inbox,
      lock: inboxLockSpec(`${hostId}-e`),
      prefetch: 1,
      exclusive: true,
      onMessage: (m) => m.ack(),
    });
    await broker.start();
    await waitFor('connected, both consuming', () =>
      broker?.connected && broker.consuming(inbox.name) && broker.consuming(controlSpec(hostId).name)
        ? true
        : undefined,
    );
    expect(broker.usage()).toEqual({ connections: 2, channels: 2, consumers: 2 });
    expect([first.forwarder.accepted, second.forwarder.accepted]).toEqual([2, 0]);

    await first.forwarder.close();
    await waitFor('on the second node, both consuming again', () =>
      broker?.currentNode === `amqp://guest:***@127.0.0.1:${second.forwarder.port}` &&
      broker.connected &&
      broker.consuming(inbox.name) &&
      broker.consuming(controlSpec(hostId).name)
        ? true
        : undefined,
    );
    expect(broker.usage()).toEqual({ connections: 2, channels: 2, consumers: 2 });
    expect(second.forwarder.accepted).toBe(2);
    expect(await publishTo(hostId, 'moved')).toEqual({ ok: true });
    await waitFor('the message through the second node', () =>
      received.includes('moved') ? true : undefined,
    );
    expect(fatal).toEqual([]);
  });

  it('a first node that does not answer at start is passed over for the next', async () => {
    const hostId = uniqueHostId('nodes');
    const dead = await node();
    await dead.forwarder.close(); // nothing listens there any more
    const live = await node();
    store = openStore({ file: ':memory:' });
    broker = createBrokerActor(hostId, store, {
      uris: [dead.uri, live.uri],
      firstNode: 0,
      retryBaseMs: 5_000,
      onFatal: () => {},
    });
    await consumeControl(hostId, []);
    await broker.start(); // resolves after the first attempt, which fails
    await waitFor('connected to the live node', () => (broker?.connected ? true : undefined));
    expect(broker.currentNode).toBe(`amqp://guest:***@127.0.0.1:${live.forwarder.port}`);
    expect(broker.nodeStates()[0]).toMatchObject({
      state: 'failing',
      lastError: expect.stringMatching(/ECONNREFUSED|refused/i),
    });
  });

  /**
   * A lock queue lives on one node. After its node hung (not killed), a gateway that moved on
   * finds its own lock still held until the cluster declares that node down: it must retry, not
   * take it for another gateway's. Here a second connection holds the lock meanwhile.
   */
  it.each([
    { graceMs: 30_000, outcome: 'retries a lock held when it comes back, and consumes once it is free' },
    { graceMs: 0, outcome: 'past broker.lockGraceMs, stops loudly (CONSUMER_REFUSED)' },
  ])('after losing its node, a gateway that finds its lock in use $outcome', async ({ graceMs }) => {
    const hostId = uniqueHostId('nodes-lock');
    const { forwarder, uri } = await node();
    store = openStore({ file: ':memory:' });
    const fatal: Array<{ code: string; message: string }> = [];
    broker = createBrokerActor(hostId, store, {
      uris: [uri],
      lockGraceMs: graceMs,
      onFatal: (err) => void fatal.push(err),
    });
    const lock = controlLockSpec(hostId);
    const queue = controlSpec(hostId, QueueMode.quorum);
    queues.push(queue.name);
    await broker.consume({ queue, lock, prefetch: 1, exclusive: false, onMessage: (m) => m.ack() });
    await broker.start();
    await waitFor('consuming', () => (broker?.consuming(queue.name) ? true : undefined));

    // Its connection goes; before it is back, another connection holds the lock (as the lost
    // node would, until it is declared down).
    const port = forwarder.port;
    await forwarder.close();
    await waitFor('connection lost', () => (broker?.connected ? undefined : true));
    const holder = await amqp.connect(brokerUri);
    const held = await holder.createChannel();
    await held.assertQueue(lock.name, { exclusive: true, autoDelete: true, durable: false });
    const again = await TcpForwarder.start('127.0.0.1', port, '127.0.0.1', 5672);
    forwarders.push(again);
    try {
      if (graceMs === 0) {
        await waitFor('refused', () => (fatal.length > 0 ? true : undefined));
        expect(fatal[0]?.code).toBe(ErrorCode.consumerRefused);
        expect(fatal[0]?.message).toMatch(/RESOURCE-LOCKED.*Another gateway already consumes this queue/);
        expect(broker.consuming(queue.name)).toBe(false);
        return;
      }
      await waitFor('a refused attempt', () => (broker?.lastError?.includes('RESOURCE') ? true : undefined));
      expect(broker.consuming(queue.name)).toBe(false);
      await holder.close(); // the lost node declared down: its lock goes
      await waitFor('consuming again', () => (broker?.consuming(queue.name) ? true : undefined));
      expect(fatal).toEqual([]);
    } finally {
      await holder.close().catch(() => undefined);
    }
  });
});
