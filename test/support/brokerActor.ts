import { BrokerActor, type BrokerActorOptions } from '../../src/actors/BrokerActor.js';
import { systemClock } from '../../src/clock/clock.js';
import { createHlc } from '../../src/clock/hlc.js';
import { silentLogger } from '../../src/log/logger.js';
import type { Store } from '../../src/store/openStore.js';
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
