import { createHash } from 'node:crypto';
import { BridgeError, ErrorCode } from '../errors.js';
import type { EntityActor } from './EntityActor.js';

/** Hashes a capability token; only hashes are stored (R-ID2). */
export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/**
 * The local entities, by gid, name and token hash. Resolves addresses: a gid, `name@host`, or
 * a bare name (R-ID1).
 */
export class Directory {
  private readonly byGid = new Map<string, EntityActor>();
  private readonly byName = new Map<string, EntityActor>();
  private readonly byToken = new Map<string, EntityActor>();

  constructor(private readonly host: string) {}

  add(entity: EntityActor): void {
    this.byGid.set(entity.gid, entity);
    this.byName.set(entity.record.name, entity);
    this.byToken.set(entity.record.tokenHash, entity);
  }

  remove(entity: EntityActor): void {
    this.byGid.delete(entity.gid);
    this.byName.delete(entity.record.name);
    this.byToken.delete(entity.record.tokenHash);
  }

  get size(): number {
    return this.byGid.size;
  }

  all(): IterableIterator<EntityActor> {
    return this.byGid.values();
  }

  byGidOrUndefined(gid: string): EntityActor | undefined {
    return this.byGid.get(gid);
  }

  hasName(name: string): boolean {
    return this.byName.has(name);
  }

  /** The entity a bearer token belongs to, or undefined. */
  authenticate(token: string): EntityActor | undefined {
    return this.byToken.get(hashToken(token));
  }

  /** Resolves an address to a local entity, or throws UNKNOWN_RECIPIENT saying what exists. */
  resolve(address: string): EntityActor {
    const found = this.find(address);
    if (found) return found;
    throw new BridgeError(
      ErrorCode.unknownRecipient,
      `unknown recipient "${address}": no entity with that gid or name on ${this.host}; ` +
        'call bridge_roster to see who is reachable',
      { details: { to: address } },
    );
  }

  find(address: string): EntityActor | undefined {
    const byGid = this.byGid.get(address);
    if (byGid) return byGid;
    const at = address.lastIndexOf('@');
    if (at > 0) {
      if (address.slice(at + 1) !== this.host) return undefined;
      return this.byName.get(address.slice(0, at));
    }
    return this.byName.get(address);
  }
}
