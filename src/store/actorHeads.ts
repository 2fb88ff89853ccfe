import { z } from 'zod';
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
