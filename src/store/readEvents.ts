import { type EventRow, inLogOrder, parseStoredRow } from './eventRow.js';
import type { Store } from './openStore.js';

/** All events of one actor, oldest first. */
export function readActorEvents(store: Store, actorKind: string, actorId: string): EventRow[] {
  const rows = store
    .prepare('SELECT * FROM events WHERE actor_kind = ? AND actor_id = ? ORDER BY seq')
    .all(actorKind, actorId);
  return rows.flatMap(parseStoredRow);
}

/** All events of one flow on this host, in the order they happened. */
export function readTraceEvents(store: Store, traceId: string): EventRow[] {
  const rows = store.prepare('SELECT * FROM events WHERE trace_id = ? ORDER BY seq').all(traceId);
  return [...inLogOrder(rows.map(parseStoredRow))];
}

/**
 * The highest hybrid-logical-clock time in the log, so a restarted clock never goes back: a
 * row's last event is its latest.
 */
export function readLastHlc(store: Store): string | undefined {
  const row = store
    .prepare<[], { hlc: string | null }>('SELECT max(coalesce(last_hlc, hlc)) AS hlc FROM events')
    .get();
  return row?.hlc ?? undefined;
}
