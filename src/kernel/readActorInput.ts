import type { InputFrom } from 'xstate';
import { BridgeError, ErrorCode } from '../errors.js';
import type { ActorKind, MachineOf } from '../machines/index.js';
import { type EventRow, parseStoredRow } from '../store/eventRow.js';
import type { Store } from '../store/openStore.js';
import { initEvent, parseRecordedEvent, type RecordedInit } from './parseRecordedEvent.js';

/** The input an actor of `kind` was created with, as its machine's input schema types it. */
export type ActorInput<K extends ActorKind> = InputFrom<MachineOf<K>>;

/**
 * The input an actor was created with (the data of its first event), parsed by its machine's
 * input schema; undefined when the log holds no such actor. A first row that is no creation or
 * that the schema refuses is a damaged row, named with its seq, not a guess at its fields.
 */
export function readActorInput<K extends ActorKind>(
  store: Store,
  kind: K,
  id: string,
): ActorInput<K> | undefined {
  const raw = store
    .prepare('SELECT * FROM events WHERE actor_kind = ? AND actor_id = ? ORDER BY seq LIMIT 1')
    .get(kind, id);
  if (raw === undefined) return undefined;
  const [row] = parseStoredRow(raw) as [EventRow];
  const where = `the event log ${store.file} has a damaged row, events seq=${row.seq} (the first of ${kind} ${id})`;
  if (row.event !== initEvent) {
    throw new BridgeError(ErrorCode.badStore, `${where}: it is a ${row.event}, not the actor's creation`);
  }
  const parsed = parseRecordedEvent(kind, row);
  if (!parsed.ok) throw new BridgeError(ErrorCode.badStore, `${where}: it ${parsed.problem}`);
  // An init row parses to its input (RecordedInit); the union also names the other rows.
  return (parsed.event as RecordedInit<K>).input;
}
