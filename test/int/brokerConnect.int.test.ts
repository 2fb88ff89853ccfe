import { afterEach, describe, expect, it } from 'vitest';
import type { BrokerActor } from '../../src/actors/BrokerActor.js';
import type { ConsumerSpec } from '../../src/broker/brokerMessages.js';
import { controlSpec } from '../../src/broker/topology.js';
import { BridgeError, ErrorCode } from '../../src/errors.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { createBrokerActor } from '../support/brokerActor.js';
import { waitFor } from '../support/federation.js';

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
});
