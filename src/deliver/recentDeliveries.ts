import { readActorInput } from '../kernel/readActorInput.js';
import { deliveryActorId, parseDeliveryActorId } from '../store/actorIds.js';
import type { Store } from '../store/openStore.js';

/** One delivery to an entity, as the operator console lists it: its state now, never its text. */
export interface RecentDelivery {
  msgId: string;
  traceId: string;
  state: string;
  /** The wire kind (SEND, ASK, …), when its creation recorded one. */
  kind: string | null;
  /** The sender's gid. */
  sender: string | null;
  acceptedAt: number | null;
  size: number | null;
  /** Why its creation could not be read (a damaged row); the rest is then null. */
  problem?: string;
}

/**
 * The latest `limit` deliveries to `recipient` (a gid) in this host's log, newest first: the
 * actor heads (state) with each one's creation (kind, sender, when, size; R-H2: no text).
 */
export function readRecentDeliveries(store: Store, recipient: string, limit: number): RecentDelivery[] {
  const heads = store
    .prepare<[string, number], { actor_id: string; trace_id: string; state: string }>(
      "SELECT actor_id, trace_id, state FROM actors WHERE actor_kind = 'delivery' AND owner = ? ORDER BY rowid DESC LIMIT ?",
    )
    .all(recipient, limit);
  return heads.map((head) => {
    const msgId = parseDeliveryActorId(head.actor_id)?.msgId ?? head.actor_id;
    const known = { msgId, traceId: head.trace_id, state: head.state };
    try {
      const input = readActorInput(store, 'delivery', deliveryActorId(msgId, recipient));
      return {
        ...known,
        kind: input?.kind ?? null,
        sender: input?.sender ?? null,
        acceptedAt: input?.acceptedAt ?? null,
        size: input?.size ?? null,
      };
    } catch (err) {
      return {
        ...known,
        kind: null,
        sender: null,
        acceptedAt: null,
        size: null,
        problem: (err as Error).message,
      };
    }
  });
}
