import type { Address } from './envelope.js';
import { namedUuid } from './ids.js';

/**
 * The address a gateway itself sends from (SPAWN_RESULT, TOO_LATE notices): not an entity,
 * so a receiver accepts it only when the host it names is the host that signed it.
 */
export function gatewayAddress(host: string): Address {
  return { gid: namedUuid('bridge-gateway', host), name: 'gateway', host, kind: 'orchestrator' };
}
