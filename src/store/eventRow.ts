import { z } from 'zod';

/** One row of the event log, as the rest of the code sees it. */
export interface EventRow {
  seq?: number;
  hlc: string;
  host: string;
  actorKind: string;
  actorId: string;
  traceId: string;
  msgId: string | null;
  event: string;
  fromState: string | null;
  toState: string;
  /** The event's payload without its type (small; never a message body). */
  data: Record<string, unknown> | null;
}

const dbRowSchema = z.object({
  seq: z.number(),
  hlc: z.string(),
  host: z.string(),
  actor_kind: z.string(),
  actor_id: z.string(),
  trace_id: z.string(),
  msg_id: z.string().nullable(),
  event: z.string(),
  from_state: z.string().nullable(),
  to_state: z.string(),
  data: z.string().nullable(),
});

/** The events table's columns, in the order `parseEventRowValues` takes them. */
export const eventColumns = [
  'seq',
  'hlc',
  'host',
  'actor_kind',
  'actor_id',
  'trace_id',
  'msg_id',
  'event',
  'from_state',
  'to_state',
  'data',
] as const;

const isText = (value: unknown): value is string => typeof value === 'string';
const isTextOrNull = (value: unknown): value is string | null => value === null || typeof value === 'string';

/**
 * Parses a raw SQLite row selected as an array (the `eventColumns`, in order, from a statement
 * in `.raw()` mode) into an EventRow: what `parseEventRow` does for a row object, for the reader
 * that goes through a whole log (replay). better-sqlite3 builds an array about twice as fast as
 * a row object with eleven named keys (2.6 vs 4.9 µs a row on the bench machine), which leaves
 * no object for the zod schema: the same checks, hand-written (and one copy fewer). A row that
 * fails them goes through `parseEventRow`, which throws the same ZodError as ever.
 */
export function parseEventRowValues(values: readonly unknown[]): EventRow & { seq: number } {
  const [seq, hlc, host, actorKind, actorId, traceId, msgId, event, fromState, toState, data] = values;
  if (
    typeof seq === 'number' &&
    Number.isFinite(seq) &&
    isText(hlc) &&
    isText(host) &&
    isText(actorKind) &&
    isText(actorId) &&
    isText(traceId) &&
    isTextOrNull(msgId) &&
    isText(event) &&
    isTextOrNull(fromState) &&
    isText(toState) &&
    isTextOrNull(data)
  ) {
    return {
      seq,
      hlc,
      host,
      actorKind,
      actorId,
      traceId,
      msgId,
      event,
      fromState,
      toState,
      data: data === null ? null : (JSON.parse(data) as Record<string, unknown>),
    };
  }
  const raw = Object.fromEntries(eventColumns.map((column, i) => [column, values[i]]));
  return parseEventRow(raw) as EventRow & { seq: number };
}

/** Parses a raw SQLite row (the edge) into an EventRow. */
export function parseEventRow(raw: unknown): EventRow {
  const row = dbRowSchema.parse(raw);
  return {
    seq: row.seq,
    hlc: row.hlc,
    host: row.host,
    actorKind: row.actor_kind,
    actorId: row.actor_id,
    traceId: row.trace_id,
    msgId: row.msg_id,
    event: row.event,
    fromState: row.from_state,
    toState: row.to_state,
    data: row.data === null ? null : (JSON.parse(row.data) as Record<string, unknown>),
  };
}
