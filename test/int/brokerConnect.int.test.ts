import amqp from 'amqplib';
import { afterEach, describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import type { BrokerActor } from '../../src/federation/BrokerActor.js';
import type { ConsumerSpec } from '../../src/federation/brokerMessages.js';
import { controlLockSpec, controlSpec, QueueMode } from '../../src/federation/topology.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor } from '../support/brokerActor.js';
import { brokerUri, waitFor } from '../support/federation.js';

/**
 * Review finding: any BridgeError met while connecting was taken as a refusal no retry can fix
 * (the start rejected, or later the gateway stopped), where only a refused consumer (and, at
 * start, a broker nobody has set up) is one. Any other error of ours is retried with backoff.
 */
describe('broker actor: what is fatal while connecting', () => {
  let store: Store | undefined;
  let broker: BrokerActor | undefined;
  const queues: string[] = [];

  afterEach(async () => {
    await broker?.stop();
    await store?.close();
    await deleteQueues(queues.splice(0));
  });

  it('retries a passing error of ours while it opens the consumers, and connects', async () => {
    const hostId = uniqueHostId('connect');
    store = openStore({ file: ':memory:' });
    const fatal: unknown[] = [];
    broker = createBrokerActor(hostId, store, { onFatal: (err) => void fatal.push(err) });
    const queue = controlSpec(hostId);
    queues.push(queue.name);
    let failures = 1;
    const spec: ConsumerSpec = {
      queue,
      exclusive: true,
      onMessage: () => undefined,
      // Read while the consumer is opened: the first connection meets an error of ours.
      get prefetch() {
        if (failures-- > 0)
          throw new BridgeError(ErrorCode.internal, 'a failure the next attempt does not meet');
        return 1;
      },
    };
    await broker.consume(spec);
    await broker.start();
    await waitFor('the broker actor connected', () => (broker?.connected ? true : undefined));
    expect(broker.consuming(queue.name)).toBe(true);
    expect(fatal).toEqual([]);
  });

  it('a queue that exists with the other type: at start a refusal that names it, what differs and the fix', async () => {
    const hostId = uniqueHostId('connect-type');
    const classic = controlSpec(hostId);
    queues.push(classic.name);
    const operator = await amqp.connect(brokerUri);
    const channel = await operator.createChannel();
    await channel.assertQueue(classic.name, { durable: true, arguments: classic.arguments });
    await operator.close();

    store = openStore({ file: ':memory:' });
    const fatal: unknown[] = [];
    broker = createBrokerActor(hostId, store, { onFatal: (err) => void fatal.push(err) });
    await broker.consume({
      queue: controlSpec(hostId, QueueMode.quorum),
      lock: controlLockSpec(hostId),
      prefetch: 1,
      exclusive: false,
      onMessage: () => undefined,
    });
    const refused = await broker.start().then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(BridgeError);
    expect((refused as BridgeError).code).toBe(ErrorCode.brokerNotSetUp);
    // RabbitMQ names the first argument that differs (here x-overflow), not always the type.
    expect((refused as BridgeError).message).toBe(
      `queue ${classic.name} exists with x-overflow none, and this release declares it with reject-publish, ` +
        'as a quorum queue (broker.queueMode: quorum). If it is a classic queue (RabbitMQ cannot change a ' +
        "queue's type in place), set broker.queueMode: classic again; otherwise, or to make it a quorum " +
        `queue, move what ${classic.name} holds elsewhere (a shovel) and delete it, so it is declared anew`,
    );
    expect(fatal).toEqual([]);
  });
});
