import type { z } from 'zod';
import { BridgeError, ErrorCode } from '../errors.js';
import { type ActorKind, machines } from '../machines/index.js';
import { initEvent } from '../runtime/foldEvents.js';
import { describeIssues } from '../wire/envelope.js';
import { parseEventRow } from './eventRow.js';
import type { Store } from './openStore.js';

/** The input an actor of `kind` was created with, as its machine's input schema types it. */
export type ActorInput<K extends ActorKind> = z.infer<(typeof machines)[K]['input']>;

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
  const row = parseEventRow(raw);
  const where = `the event log ${store.file} has a damaged row, events seq=${row.seq} (the first of ${kind} ${id})`;
  if (row.event !== initEvent) {
    throw new BridgeError(ErrorCode.badStore, `${where}: it is a ${row.event}, not the actor's creation`);
  }
  const parsed = machines[kind].input.safeParse(row.data);
  if (!parsed.success) {
    throw new BridgeError(
      ErrorCode.badStore,
      `${where}: its input is not what a ${kind} takes (${describeIssues(parsed.error)})`,
      { cause: parsed.error },
    );
  }
  // machines[kind] is K's own schema; TypeScript widens the lookup to every kind's output.
  return parsed.data as ActorInput<K>;
}
