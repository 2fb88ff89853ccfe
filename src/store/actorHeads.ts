import { z } from 'zod';
import { deliveryActorId } from './actorIds.js';
import type { Store } from './openStore.js';

const headSchema = z.object({
  actor_kind: z.string(),
  actor_id: z.string(),
  owner: z.string().nullable(),
  trace_id: z.string(),
  state: z.string(),
  done: z.number(),
});

export interface ActorHead {
  actorKind: string;
  actorId: string;
  owner: string | null;
  traceId: string;
  state: string;
  done: boolean;
}

function toHead(raw: unknown): ActorHead {
  const row = headSchema.parse(raw);
  return {
    actorKind: row.actor_kind,
    actorId: row.actor_id,
    owner: row.owner,
    traceId: row.trace_id,
    state: row.state,
    done: row.done === 1,
  };
}

/** Actors not yet in a final state, in creation order (which is per-recipient FIFO order). */
export function readLiveActors(store: Store, actorKind: string): ActorHead[] {
  return store
    .prepare('SELECT * FROM actors WHERE done = 0 AND actor_kind = ? ORDER BY rowid')
    .all(actorKind)
    .map(toHead);
}

/** One actor's head, or undefined: the dedup lookup for deliveries (msgId + recipient). */
export function readActorHead(store: Store, actorKind: string, actorId: string): ActorHead | undefined {
  const raw = store
    .prepare('SELECT * FROM actors WHERE actor_kind = ? AND actor_id = ?')
    .get(actorKind, actorId);
  return raw === undefined ? undefined : toHead(raw);
}

/** Counts of actors of a kind by state (for status and metrics). */
export function countActorsByState(store: Store, actorKind: string): Record<string, number> {
  const rows = store
    .prepare<[string], { state: string; n: number }>(
      'SELECT state, count(*) AS n FROM actors WHERE actor_kind = ? GROUP BY state',
    )
    .all(actorKind);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

/**
 * The trace a message belongs to, for replies that name it in `in_reply_to`: from the head of
 * its send (sent from here) or of a delivery of it (received here), by the actors table's key,
 * so that a reply costs the same however long the log has grown (the events table has no index
 * by msgId). Undefined when this host has neither.
 */
export function readTraceOfMessage(store: Store, msgId: string): string | undefined {
  const row = store
    .prepare<[{ msgId: string; from: string; to: string }], { trace_id: string }>(traceOfMessageSql)
    .get({ msgId, from: deliveryActorId(msgId, ''), to: `${msgId}0` });
  return row?.trace_id;
}

/**
 * Exported for the test that reads its query plan. A delivery's id is \`msgId/recipient\`: its
 * range starts at \`msgId/\` and ends before \`msgId0\` ('0' follows '/').
 */
export const traceOfMessageSql = `SELECT trace_id FROM actors WHERE actor_kind = 'send' AND actor_id = @msgId
  UNION ALL
  SELECT trace_id FROM actors WHERE actor_kind = 'delivery' AND actor_id >= @from AND actor_id < @to
  LIMIT 1`;
