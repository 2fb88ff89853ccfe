import { z } from 'zod';
import { isHlc } from '../clock/hlc.js';
import { receiptSchema } from '../receipts/receipt.js';

/**
 * The message envelope: what a sender hands to the router and what crosses the broker.
 * `v` is the schema version (R-H3): within a major, unknown fields are ignored; a newer major
 * is refused, never half-parsed.
 */
export const schemaVersion = { major: 1, minor: 2 } as const;
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
  /** A delivery's stage, from the recipient's gateway to the sender's (R-RC1; schema 1.2). */
  receipt: 'RECEIPT',
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

/** What a SPAWN asks for: a profile the target host owns, never a command (U4). */
export const spawnRequestSchema = z.looseObject({
  requestId: z.string().uuid(),
  profile: z.string().min(1).max(64),
  name: z.string().regex(entityNamePattern, 'not an entity name').optional(),
  groups: z.array(z.string().regex(entityNamePattern, 'not a group name')).max(32).optional(),
});
export type SpawnRequest = z.infer<typeof spawnRequestSchema>;

/** Keys that would say how to run something: a spawn request carrying any is refused (U4). */
const runKeys: ReadonlySet<string> = new Set([
  'command',
  'cmd',
  'args',
  'argv',
  'cwd',
  'env',
  'repo',
  'shell',
  'script',
  'injector',
]);

/** The keys of a spawn request (or tool call) that try to name what to run. */
export function smuggledRunKeys(request: object | undefined): string[] {
  return Object.keys(request ?? {}).filter((key) => runKeys.has(key));
}

/** A control request's outcome, answered to the requester's inbox as SPAWN_RESULT. */
export const controlResultSchema = z.object({
  requestId: z.string().uuid(),
  /** What was asked: a spawn, or a stop. */
  op: z.enum(['spawn', 'stop']),
  ok: z.boolean(),
  gid: z.string().uuid().optional(),
  name: z.string().optional(),
  host: z.string().optional(),
  code: z.string().max(64).optional(),
  message: z.string().max(2000).optional(),
});
export type ControlResult = z.infer<typeof controlResultSchema>;

/**
 * Most receipts one RECEIPT carries: the receipts of one commit for one host travel together
 * (one signature, one publish, one admission). The sender also keeps a RECEIPT under
 * `maxReceiptBytesPerEnvelope`, below the smallest wire limit a gateway can have
 * (limits.maxTextBytes plus 16 KiB).
 */
export const maxReceiptsPerEnvelope = 64;
export const maxReceiptBytesPerEnvelope = 12 * 1024;

/** Which optional part each kind must carry (schema 1.1; RECEIPT since 1.2). */
const requiredPart: Partial<Record<WireKind, 'turnId' | 'spawn' | 'stop' | 'result' | 'receipts'>> = {
  ASK: 'turnId',
  ANSWER: 'turnId',
  TOO_LATE: 'turnId',
  SPAWN: 'spawn',
  STOP: 'stop',
  SPAWN_RESULT: 'result',
  RECEIPT: 'receipts',
};

export const envelopeSchema = z
  .object({
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
    /** ASK, ANSWER, TOO_LATE: the asking turn (U2). */
    turnId: z.string().uuid().optional(),
    /** SPAWN: the profile and name asked for (U4). */
    spawn: spawnRequestSchema.optional(),
    /** STOP: the spawned entity to end (U4). */
    stop: z.object({ requestId: z.string().uuid(), gid: z.string().uuid() }).optional(),
    /** SPAWN_RESULT: how a spawn or stop went. */
    result: controlResultSchema.optional(),
    /**
     * RECEIPT: how far deliveries got, one receipt each. Written by the recipients' gateway
     * (`from` is its gateway address), addressed to the senders' host (`to`), on
     * `control.<host>`.
     */
    receipts: z.array(receiptSchema).min(1).max(maxReceiptsPerEnvelope).optional(),
  })
  .superRefine((envelope, ctx) => {
    const part = requiredPart[envelope.kind];
    if (part !== undefined && envelope[part] === undefined) {
      ctx.addIssue({ code: 'custom', path: [part], message: `a ${envelope.kind} carries "${part}"` });
    }
  });
export type Envelope = z.infer<typeof envelopeSchema>;
