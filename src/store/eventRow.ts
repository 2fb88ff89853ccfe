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
