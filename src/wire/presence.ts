import { z } from 'zod';
import { entityKindSchema, hlcSchema, schemaVersion } from './envelope.js';

/** A gateway's PRESENCE snapshot (U5): its local entities, every heartbeat. Soft state. */
export const presenceEntrySchema = z.object({
  gid: z.string().uuid(),
  name: z.string(),
  kind: entityKindSchema,
  groups: z.array(z.string()),
  status: z.string(),
});
export type PresenceEntry = z.infer<typeof presenceEntrySchema>;

export const presenceSchema = z.object({
  v: z.string().regex(/^\d+\.\d+$/),
  kind: z.literal('PRESENCE'),
  host: z.string().min(1),
  hlc: hlcSchema,
  /** Sent every heartbeat; a receiver expires the host after ttlMs without one. */
  ttlMs: z.number().int().min(1),
  entities: z.array(presenceEntrySchema),
});
export type Presence = z.infer<typeof presenceSchema>;

export function encodePresence(presence: Presence): Buffer {
  return Buffer.from(JSON.stringify(presence), 'utf8');
}

export type DecodedPresence = { ok: true; presence: Presence } | { ok: false; detail: string };

export function decodePresence(bytes: Buffer): DecodedPresence {
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    return { ok: false, detail: `not JSON: ${(err as Error).message}` };
  }
  const parsed = presenceSchema.safeParse(raw);
  if (!parsed.success) return { ok: false, detail: parsed.error.issues.map((i) => i.message).join('; ') };
  if (Number(parsed.data.v.split('.')[0]) > schemaVersion.major) {
    return { ok: false, detail: `presence schema ${parsed.data.v} is newer than this gateway's` };
  }
  return { ok: true, presence: parsed.data };
}
