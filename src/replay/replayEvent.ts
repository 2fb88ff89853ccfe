import { z } from 'zod';
import type { EventRow } from '../store/eventRow.js';

/** One event of a replayed flow: a row of some host's event log, with its position there. */
export interface ReplayEvent extends EventRow {
  seq: number;
}

/** The export format's version (`agentbridge export` writes it, `agentbridge replay` checks it). */
export const exportVersion = 1;

/** First line of an export: what it holds. */
export const exportHeaderSchema = z.object({
  bridgeExport: z.literal(exportVersion),
  host: z.string(),
  traceId: z.string().nullable(),
  exportedAt: z.string(),
  events: z.number().int().min(0),
});
export type ExportHeader = z.infer<typeof exportHeaderSchema>;

/** Every other line: one event, as the log holds it. */
export const exportEventSchema = z.object({
  seq: z.number().int(),
  hlc: z.string().regex(/^\d{15}\.\d{6}$/),
  host: z.string(),
  actorKind: z.string(),
  actorId: z.string(),
  traceId: z.string(),
  msgId: z.string().nullable(),
  event: z.string(),
  fromState: z.string().nullable(),
  toState: z.string(),
  data: z.record(z.string(), z.unknown()).nullable(),
});

/** Replay order: hybrid-logical-clock time, then host, then position in that host's log. */
export function compareEvents(a: ReplayEvent, b: ReplayEvent): number {
  if (a.hlc !== b.hlc) return a.hlc < b.hlc ? -1 : 1;
  if (a.host !== b.host) return a.host < b.host ? -1 : 1;
  return a.seq - b.seq;
}
