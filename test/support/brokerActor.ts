import { BrokerActor, type BrokerActorOptions } from '../../src/federation/BrokerActor.js';
import type { PublishOutcome } from '../../src/federation/brokerMessages.js';
import { controlKey, Exchange } from '../../src/federation/topology.js';
import { systemClock } from '../../src/kernel/clock.js';
import { silentLogger } from '../../src/log/logger.js';
import type { Store } from '../../src/store/openStore.js';
import { createHlc } from '../../src/wire/hlc.js';
import { brokerUri } from './federation.js';

/** A broker actor of its own on the shared broker, as a gateway's federation makes one. */
export function createBrokerActor(
  hostId: string,
  store: Store,
  options: Partial<BrokerActorOptions> & Pick<BrokerActorOptions, 'onFatal'>,
): BrokerActor {
  return new BrokerActor({
    store,
    hlc: createHlc(() => systemClock.now()),
    clock: systemClock,
    host: hostId,
    logger: silentLogger(),
    uris: [brokerUri],
    hostId,
    retryBaseMs: 50,
    retryMaxMs: 200,
    ...options,
  });
}

/** Publishes `text` to host `hostId`'s control queue (message id `<host>/<text>`), as a SPAWN goes. */
export function publishControl(broker: BrokerActor, hostId: string, text: string): Promise<PublishOutcome> {
  return broker.publish({
    exchange: Exchange.control,
    routingKey: controlKey(hostId),
    content: Buffer.from(text),
    messageId: `${hostId}/${text}`,
    mandatory: true,
    persistent: true,
  });
}
