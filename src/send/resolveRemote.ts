import type { Config } from '../config/schema.js';
import type { Directory } from '../deliver/Directory.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Federation } from '../federation/Federation.js';
import type { Address } from '../wire/envelope.js';

export interface ResolveDeps {
  host: string;
  directory: Directory;
  federation?: Federation | undefined;
  config: { broker: Pick<Config['broker'], 'heartbeatMs'> };
}

/** The host of a recipient addressed by a gid the roster does not know. */
export const unknownHost = 'unknown';
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function addressOf(entity: EntityActor, host: string): Address {
  return { gid: entity.gid, name: entity.record.name, host, kind: entity.record.kind };
}

/** A recipient on another host, from the roster; a bare gid goes to the broker as it is. */
export function resolveRemote(deps: ResolveDeps, address: string): Address {
  const federation = deps.federation;
  if (!federation) return addressOf(deps.directory.resolve(address), deps.host);
  const matches = federation.roster.find(address);
  if (matches.length > 1) {
    const where = matches.map((m) => `${m.name}@${m.host}`).join(', ');
    throw new BridgeError(
      ErrorCode.ambiguousRecipient,
      `"${address}" names more than one entity (${where}): address it as name@host or by gid`,
    );
  }
  const [match] = matches;
  if (match) return { gid: match.gid, name: match.name, host: match.host, kind: match.kind };
  // The roster resolves existence, the broker resolves location (invariant 2): an unknown
  // gid is still tried, and a mandatory publish tells us if no inbox has it.
  if (uuidPattern.test(address)) return { gid: address, name: address, host: unknownHost, kind: 'worker' };
  const hosts = [deps.host, ...federation.roster.hostIds()].join(', ');
  const { broker } = deps.config;
  // Right after a start or a reconnect the roster has not heard every host yet: say so, and
  // let the caller retry instead of giving up on a recipient that may well exist.
  const filling = federation.roster.filling(broker.heartbeatMs * 2);
  throw new BridgeError(
    ErrorCode.unknownRecipient,
    `unknown recipient "${address}": no entity with that gid or name on this host or in the roster ` +
      `(hosts: ${hosts}); ` +
      (filling
        ? `the roster is still filling (this gateway only just reached the broker): retry in ${Math.ceil((broker.heartbeatMs * 2) / 1000)} s, or address it by gid`
        : 'call bridge_roster to see who is reachable'),
    { details: { to: address }, retryable: filling },
  );
}
