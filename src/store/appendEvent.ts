import { type EventRow, laterEntry, withLater } from './eventRow.js';
import type { Store } from './openStore.js';

const insertEvent = `INSERT INTO events (hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data, later, last_hlc)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;
/** Where `later` and `last_hlc` sit in insertEvent's parameters. */
const laterParam = 10;
const lastHlcParam = 11;
const upsertHead = `INSERT INTO actors (actor_kind, actor_id, owner, trace_id, state, done) VALUES (?, ?, ?, ?, ?, ?)
  ON CONFLICT (actor_kind, actor_id) DO UPDATE SET state = excluded.state, done = excluded.done`;

export interface AppendOptions {
  /** The actor's owner (a delivery's recipient), kept on its `actors` row. */
  owner?: string | null;
  /** Whether the actor reached a final state with this event. */
  done: boolean;
}

/**
 * Appends one transition to the log and moves the actor's head row, in the current batch.
 * Durable once the batch commits (`store.batch.flush()` / `afterCommit`). An actor's
 * transitions in one batch are one events row (the first in its columns, the rest in its
 * `later` list: see eventRow.ts) and move its head once: the last one is what recovery reads.
 */
export function appendEvent(store: Store, row: EventRow, options: AppendOptions): void {
  const actor = `${row.actorKind}\0${row.actorId}`;
  store.batch.write(
    insertEvent,
    [
      row.hlc,
      row.host,
      row.actorKind,
      row.actorId,
      row.traceId,
      row.msgId,
      row.event,
      row.fromState,
      row.toState,
      row.data === null ? null : JSON.stringify(row.data),
      null,
      null,
    ],
    `event\0${actor}`,
    ({ params }) => {
      params[laterParam] = withLater(params[laterParam] as string | null, laterEntry(row));
      params[lastHlcParam] = row.hlc;
      return true;
    },
  );
  store.batch.write(
    upsertHead,
    [row.actorKind, row.actorId, options.owner ?? null, row.traceId, row.toState, options.done ? 1 : 0],
    `head\0${actor}`,
  );
}
