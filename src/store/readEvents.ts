import { type EventRow, parseEventRow } from './eventRow.js';
import type { Store } from './openStore.js';

/** All events of one actor, oldest first. */
export function readActorEvents(store: Store, actorKind: string, actorId: string): EventRow[] {
  return store
    .prepare('SELECT * FROM events WHERE actor_kind = ? AND actor_id = ? ORDER BY seq')
    .all(actorKind, actorId)
    .map(parseEventRow);
}

/** All events of one flow on this host, oldest first. */
export function readTraceEvents(store: Store, traceId: string): EventRow[] {
  return store
    .prepare('SELECT * FROM events WHERE trace_id = ? ORDER BY seq')
    .all(traceId)
    .map(parseEventRow);
}

/** The highest hybrid-logical-clock time in the log, so a restarted clock never goes back. */
export function readLastHlc(store: Store): string | undefined {
  const row = store.prepare<[], { hlc: string | null }>('SELECT max(hlc) AS hlc FROM events').get();
  return row?.hlc ?? undefined;
}
