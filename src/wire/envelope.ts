import { z } from 'zod';
import { busyPolicySchema, ownerDecisionSchema } from './agentHost.js';
import { isHlc } from './hlc.js';
import { receiptSchema } from './receipt.js';

/**
 * The message envelope: what a sender hands to the router and what crosses the broker.
 * `v` is the schema version (R-H3): within a major, unknown fields are ignored; a newer major
 * is refused, never half-parsed.
 */
// 1.3: the `operator` entity kind (the operator console's humans), in addresses and presence.
// 1.4: a worker's delivery path and agent in presence (an agent host's worker).
// 1.5: OWNER_ANSWER, an owner's answer to a spawned worker's agent from another host, and the
//      open permission request of an agent host's worker in presence.
// 1.6: a host's current sealing key in its PRESENCE (issue 34; sealed envelopes are major 2).
export const schemaVersion = { major: 1, minor: 6 } as const;
export const schemaVersionString = `${schemaVersion.major}.${schemaVersion.minor}`;

/** A schema version string (`MAJOR.MINOR`, as `v` carries it) as its two numbers. */
export function versionParts(version: string): { major: number; minor: number } {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  return { major, minor };
}

/**
 * The newest major this gateway reads: 1, and 2 for a sealed envelope (wire/sealedEnvelope.ts,
 * whose text only the hosts it is sealed to can read).
 */
export const readableMajor = 2;

/** Whether `version` is of a newer major than this gateway reads (`than`): refused, never half-parsed. */
export function isNewerMajor(version: string, than: number = readableMajor): boolean {
  return versionParts(version).major > than;
}

/** Whether a peer that writes schema `version` (its PRESENCE's) reads what `since` brought. */
export function versionAtLeast(version: string, since: { major: number; minor: number }): boolean {
  const { major, minor } = versionParts(version);
  return major > since.major || (major === since.major && minor >= since.minor);
}

/** The schema whose hosts open sealed envelopes (2.0) and announce their sealing key: a peer before it cannot. */
export const sealedSince = { major: 1, minor: 6 } as const;

/** The schema that brought OWNER_ANSWER: a peer before it refuses the kind. */
export const ownerAnswerSince = { major: 1, minor: 5 } as const;

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
  /** The owner's answer to a permission request of a spawned worker's agent (issue 33; schema 1.5). */
  ownerAnswer: 'OWNER_ANSWER',
  presence: 'PRESENCE',
  /** A delivery's stage, from the recipient's gateway to the sender's (R-RC1; schema 1.2). */
  receipt: 'RECEIPT',
} as const;
export type WireKind = (typeof WireKind)[keyof typeof WireKind];

/** `operator`: a person at the operator console; it holds its messages, as a main does. */
export const entityKinds = ['worker', 'main', 'orchestrator', 'operator'] as const;
export const entityKindSchema = z.enum(entityKinds);
export type EntityKind = z.infer<typeof entityKindSchema>;

/** Names and host ids as the gateways make them: nothing that could fake a pane header. */
export const entityNamePattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const hostIdPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/** What `entityNamePattern` allows, in words, for every error that refuses a name or group. */
export const nameRule = '1-64 letters, digits, ".", "_" or "-", starting with a letter or digit';

/**
 * One rule for entity names and group names at every edge (MCP, admin socket, CLI, config,
 * spawn, the wire). A group is a routing-key word: `#`, `*` or a dot-free wildcard would bind
 * an inbox to every broadcast (R-U8), a newline would fake a pane header.
 */
export const entityNameSchema = z.string().regex(entityNamePattern, {
  error: (issue) => `${quoted(issue.input)} is not an entity name: use ${nameRule}`,
});
export const groupNameSchema = z.string().regex(entityNamePattern, {
  error: (issue) => `${quoted(issue.input)} is not a group name: use ${nameRule} (no "#" or "*")`,
});
/** Most groups one entity (or one spawn request) names. */
export const maxGroups = 32;
export const groupsSchema = z
  .array(groupNameSchema)
  .max(maxGroups, { error: (issue) => `${countOf(issue.input)} groups: at most ${maxGroups}` });
/** Most characters of a profile name in a spawn request. */
export const maxProfileLength = 64;
export const profileRequestSchema = z
  .string()
  .min(1, 'name a profile of the target host')
  .max(maxProfileLength, {
    error: (issue) =>
      `a profile name is at most ${maxProfileLength} characters, got ${lengthOf(issue.input)}`,
  });

export function isGroupName(group: string): boolean {
  return entityNamePattern.test(group);
}

/** A broadcast's address (its envelope's `to`) is this and `all` or a group name. */
export const broadcastPrefix = 'broadcast.';

/** A value as an error shows it: JSON-quoted (a newline reads as \n), and cut short. */
function quoted(value: unknown): string {
  const json = JSON.stringify(value) ?? String(value);
  return json.length > 80 ? `${json.slice(0, 77)}...` : json;
}

function countOf(value: unknown): number {
  return Array.isArray(value) ? value.length : 0;
}

function lengthOf(value: unknown): number {
  return typeof value === 'string' ? value.length : 0;
}

/** zod issues as one line: `path: message; ...` (`whole` names an issue at the root). */
export function describeIssues(error: z.ZodError, whole = '(root)'): string {
  const shown = error.issues
    .slice(0, maxIssuesShown)
    .map((i) => `${i.path.join('.') || whole}: ${i.message}`);
  const more = error.issues.length - shown.length;
  // Someone else's input decides how many issues there are: a refusal stays one short line.
  return more > 0 ? `${shown.join('; ')}; and ${more} more` : shown.join('; ');
}

/** Schema issues named in a refusal; the rest are counted. */
const maxIssuesShown = 10;

export const addressSchema = z.object({
  gid: z.string().uuid(),
  name: z.string().regex(entityNamePattern, 'not an entity name'),
  host: z.string().regex(hostIdPattern, 'not a host id'),
  kind: entityKindSchema,
});
export type Address = z.infer<typeof addressSchema>;

/** A hybrid-logical-clock time as it travels (see src/wire/hlc.ts). */
export const hlcSchema = z.string().refine(isHlc, 'not a hybrid-logical-clock time');

/** The latest time a JavaScript Date can hold. */
const maxEpochMs = 8_640_000_000_000_000;

/** What a SPAWN asks for: a profile the target host owns, never a command (U4). */
export const spawnRequestSchema = z.looseObject({
  requestId: z.string().uuid(),
  profile: profileRequestSchema,
  name: entityNameSchema.optional(),
  groups: groupsSchema.optional(),
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

/** An owner's answer to a spawned worker's agent, sent to the worker's host (OWNER_ANSWER). */
export const ownerAnswerRequestSchema = z.object({
  requestId: z.string().uuid(),
  gid: z.string().uuid(),
  decision: ownerDecisionSchema,
  /** The agent's request to answer; absent, the oldest open one. */
  request: z.number().int().positive().optional(),
});
export type OwnerAnswerRequest = z.infer<typeof ownerAnswerRequestSchema>;

/** A control request's outcome, answered to the requester's inbox as SPAWN_RESULT. */
export const controlResultSchema = z.object({
  requestId: z.string().uuid(),
  /** What was asked: a spawn, a stop, or an owner's answer to a worker's agent. */
  op: z.enum(['spawn', 'stop', 'answer']),
  ok: z.boolean(),
  gid: z.string().uuid().optional(),
  name: z.string().optional(),
  host: z.string().optional(),
  code: z.string().max(64).optional(),
  message: z.string().max(2000).optional(),
  /** A spawned agent a person can attach to (Codex's TUI on its app-server): the command. */
  attach: z.string().max(4096).optional(),
  /** An answer: which of the agent's permission requests it answered, and how. */
  request: z.number().int().positive().optional(),
  decision: ownerDecisionSchema.optional(),
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
const requiredPart: Partial<
  Record<WireKind, 'turnId' | 'spawn' | 'stop' | 'ownerAnswer' | 'result' | 'receipts'>
> = {
  ASK: 'turnId',
  ANSWER: 'turnId',
  TOO_LATE: 'turnId',
  SPAWN: 'spawn',
  STOP: 'stop',
  OWNER_ANSWER: 'ownerAnswer',
  SPAWN_RESULT: 'result',
  RECEIPT: 'receipts',
};

export const envelopeShape = z.object({
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
  /**
   * SEND, REPLY: for a worker whose agent takes a message into a running turn, `queue` holds it
   * until the turn ends instead (wire/agentHost.ts `BusyPolicy`); absent, the worker's policy.
   */
  busy: busyPolicySchema.optional(),
  /** ASK, ANSWER, TOO_LATE: the asking turn (U2). */
  turnId: z.string().uuid().optional(),
  /** SPAWN: the profile and name asked for (U4). */
  spawn: spawnRequestSchema.optional(),
  /** STOP: the spawned entity to end (U4). */
  stop: z.object({ requestId: z.string().uuid(), gid: z.string().uuid() }).optional(),
  /**
   * OWNER_ANSWER: allow or deny a permission request of a spawned worker's agent (the oldest open
   * one, or `request`), sent by the entity that spawned it (or an operator on its host).
   */
  ownerAnswer: ownerAnswerRequestSchema.optional(),
  /** SPAWN_RESULT: how a spawn, stop or owner's answer went. */
  result: controlResultSchema.optional(),
  /**
   * RECEIPT: how far deliveries got, one receipt each. Written by the recipients' gateway
   * (`from` is its gateway address), addressed to the senders' host (`to`), on
   * `control.<host>`.
   */
  receipts: z.array(receiptSchema).min(1).max(maxReceiptsPerEnvelope).optional(),
});

/** The part a kind must carry, as an issue of `ctx` when it does not (sealed or not). */
export function requirePart(
  envelope: { kind: WireKind } & Partial<Record<NonNullable<(typeof requiredPart)[WireKind]>, unknown>>,
  ctx: z.RefinementCtx,
): void {
  const part = requiredPart[envelope.kind];
  if (part !== undefined && envelope[part] === undefined) {
    ctx.addIssue({ code: 'custom', path: [part], message: `a ${envelope.kind} carries "${part}"` });
  }
}

export const envelopeSchema = envelopeShape.superRefine(requirePart);
export type Envelope = z.infer<typeof envelopeSchema>;

/**
 * Enough of a SPAWN whose request does not parse (a name, group or profile the rule refuses)
 * to answer its requester with the refusal: a requester that got no SPAWN_RESULT would wait
 * for one in vain.
 */
export const spawnHeaderSchema = envelopeShape
  .pick({ v: true, msgId: true, traceId: true, hlc: true, from: true, to: true })
  .extend({ kind: z.literal(WireKind.spawn), spawn: z.looseObject({ requestId: z.string().uuid() }) });
export type SpawnHeader = z.infer<typeof spawnHeaderSchema>;
