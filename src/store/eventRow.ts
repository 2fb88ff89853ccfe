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
  later: z.string().nullable().optional(),
});

/**
 * A stored row holds an actor's events of one commit (schema migration 6): its columns are the
 * first, `later` lists the ones after it, each as `[hlc, event, fromState, toState, data]`; the
 * host, actor, trace and msgId are the row's. Rows written before hold one event and no `later`.
 */
type LaterEntry = [hlc: string, event: string, fromState: string | null, toState: string, data: unknown];

/** One event as an entry of a row's `later` list (JSON text, appended with `withLater`). */
export function laterEntry(row: EventRow): string {
  return JSON.stringify([row.hlc, row.event, row.fromState, row.toState, row.data] satisfies LaterEntry);
}

/** A row's `later` list with one more entry. */
export function withLater(later: string | null, entry: string): string {
  return later === null ? `[${entry}]` : `${later.slice(0, -1)},${entry}]`;
}

/** The events table's columns, in the order `parseStoredRowValues` takes them. */
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
  'later',
] as const;

const isText = (value: unknown): value is string => typeof value === 'string';
const isTextOrNull = (value: unknown): value is string | null => value === null || typeof value === 'string';
const isData = (value: unknown): value is Record<string, unknown> | null =>
  value === null || (typeof value === 'object' && !Array.isArray(value));

/** One entry of a row's `later` list, as read back. */
export interface LaterEvent {
  hlc: string;
  event: string;
  fromState: string | null;
  toState: string;
  data: Record<string, unknown> | null;
}

/**
 * A row's `later` list read back: its events, or why it is damaged. The gateway's readers throw
 * that reason (`expand`); the console's list of flows counts the row's first event and goes on.
 */
export function parseLater(
  later: string | null | undefined,
): { ok: true; events: LaterEvent[] } | { ok: false; why: string } {
  if (later === null || later === undefined) return { ok: true, events: [] };
  let list: unknown;
  try {
    list = JSON.parse(later);
  } catch (err) {
    return { ok: false, why: `are not JSON (${(err as Error).message})` };
  }
  if (!Array.isArray(list)) return { ok: false, why: 'are not a list' };
  const events: LaterEvent[] = [];
  for (const entry of list as unknown[]) {
    const [hlc, event, fromState, toState, data] = Array.isArray(entry) ? entry : [];
    if (!(isText(hlc) && isText(event) && isTextOrNull(fromState) && isText(toState) && isData(data))) {
      return {
        ok: false,
        why: `hold an entry that is not [hlc, event, from, to, data]: ${JSON.stringify(entry)}`,
      };
    }
    events.push({ hlc, event, fromState, toState, data });
  }
  return { ok: true, events };
}

/** The events of one stored row: its own, then its `later` ones, each a whole EventRow. */
function expand<T extends EventRow>(first: T, later: string | null | undefined): T[] {
  const parsed = parseLater(later);
  // Named with its row, as zod names a damaged column.
  if (!parsed.ok) throw new Error(`events row seq=${String(first.seq)}: its later events ${parsed.why}`);
  return [first, ...parsed.events.map((event) => ({ ...first, ...event }))];
}

/**
 * Parses a raw SQLite row selected as an array (the `eventColumns`, in order, from a statement
 * in `.raw()` mode) into its events: what `parseStoredRow` does for a row object, for the reader
 * that goes through a whole log (replay). better-sqlite3 builds an array about twice as fast as
 * a row object with eleven named keys (2.6 vs 4.9 µs a row on the bench machine), which leaves
 * no object for the zod schema: the same checks, hand-written (and one copy fewer). A row that
 * fails them goes through `parseStoredRow`, which throws the same ZodError as ever.
 */
export function parseStoredRowValues(values: readonly unknown[]): Array<EventRow & { seq: number }> {
  const [seq, hlc, host, actorKind, actorId, traceId, msgId, event, fromState, toState, data, later] = values;
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
    isTextOrNull(data) &&
    (later === undefined || isTextOrNull(later))
  ) {
    const first = {
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
    return expand(first, later);
  }
  const raw = Object.fromEntries(eventColumns.map((column, i) => [column, values[i]]));
  return parseStoredRow(raw) as Array<EventRow & { seq: number }>;
}

/** Parses a raw SQLite row (the edge) into the events it holds. */
export function parseStoredRow(raw: unknown): EventRow[] {
  const row = dbRowSchema.parse(raw);
  const first: EventRow = {
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
  return expand(first, row.later);
}

/**
 * One host's events in the order they happened, from its rows in seq order (all of them, or
 * those of one trace or actor). A row's later events came after its first but may have come
 * before the first of the rows after it (the rows of one commit are in the order their actors
 * first moved), so each waits until the next row's first event is later: a host's clock only
 * goes forward, so HLC order is the order of its log.
 */
export function* inLogOrder<T extends EventRow>(rows: Iterable<T[]>): Generator<T> {
  const waiting: T[] = [];
  for (const [first, ...later] of rows) {
    if (first === undefined) continue;
    while (waiting.length > 0 && (waiting[0] as T).hlc < first.hlc) yield waiting.shift() as T;
    yield first;
    for (const event of later) {
      let at = waiting.length;
      while (at > 0 && (waiting[at - 1] as T).hlc > event.hlc) at--;
      waiting.splice(at, 0, event);
    }
  }
  yield* waiting;
}
