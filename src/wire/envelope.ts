import { z } from 'zod';
import { isHlc } from '../clock/hlc.js';

/**
 * The message envelope: what a sender hands to the router and what crosses the broker.
 * `v` is the schema version (R-H3): within a major, unknown fields are ignored; a newer major
 * is refused, never half-parsed.
 */
export const schemaVersion = { major: 1, minor: 0 } as const;
export const schemaVersionString = `${schemaVersion.major}.${schemaVersion.minor}`;

export const WireKind = {
  send: 'SEND',
  reply: 'REPLY',
  ask: 'ASK',
  answer: 'ANSWER',
  tooLate: 'TOO_LATE',
  broadcast: 'BROADCAST',
  spawn: 'SPAWN',
  spawnResult: 'SPAWN_RESULT',
  stop: 'STOP',
  presence: 'PRESENCE',
} as const;
export type WireKind = (typeof WireKind)[keyof typeof WireKind];

export const entityKinds = ['worker', 'main', 'orchestrator'] as const;
export const entityKindSchema = z.enum(entityKinds);
export type EntityKind = z.infer<typeof entityKindSchema>;

/** Names and host ids as the gateways make them: nothing that could fake a pane header. */
export const entityNamePattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const hostIdPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export const addressSchema = z.object({
  gid: z.string().uuid(),
  name: z.string().regex(entityNamePattern, 'not an entity name'),
  host: z.string().regex(hostIdPattern, 'not a host id'),
  kind: entityKindSchema,
});
export type Address = z.infer<typeof addressSchema>;

/** A hybrid-logical-clock time as it travels (see src/clock/hlc.ts). */
export const hlcSchema = z.string().refine(isHlc, 'not a hybrid-logical-clock time');

/** The latest time a JavaScript Date can hold. */
const maxEpochMs = 8_640_000_000_000_000;

export const envelopeSchema = z.object({
  v: z.string().regex(/^\d+\.\d+$/),
  kind: z.enum(Object.values(WireKind) as [WireKind, ...WireKind[]]),
  msgId: z.string().uuid(),
  traceId: z.string().min(1).max(128),
  hlc: hlcSchema,
  from: addressSchema,
  /** Recipient gid (or a broadcast routing key). */
  to: z.string().min(1),
  text: z.string(),
  inReplyTo: z.string().uuid().optional(),
  /** Absolute deadline (ms since epoch) after which the message is dead-lettered as expired. */
  expiresAt: z.number().int().min(0).max(maxEpochMs).optional(),
});
export type Envelope = z.infer<typeof envelopeSchema>;
