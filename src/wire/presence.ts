import { z } from 'zod';
import { hasUnsafeChar, neutraliseLine } from '../text/neutralise.js';
import {
  maxPermissionTitle,
  type NativePath,
  nativePathSchema,
  type OpenPermission,
  openPermissionSchema,
} from './agentHost.js';
import {
  describeIssues,
  entityKindSchema,
  entityNamePattern,
  hlcSchema,
  isNewerMajor,
  schemaVersion,
  WireKind,
} from './envelope.js';
import { decodeHlc } from './hlc.js';
import { boundedDetail } from './wireSize.js';

/** Most characters of a worker's agent name in a PRESENCE. */
export const maxAgentName = 64;

/**
 * An agent's own words in a PRESENCE (its name, what it asks): another host's text, so at most
 * `max` characters and nothing that acts on a terminal. `presenceAgentOf` makes them so.
 */
function agentWords(max: number, what: string) {
  return z
    .string()
    .max(max)
    .refine((text) => !hasUnsafeChar(text), `control or format characters in ${what}`);
}

/** A gateway's PRESENCE snapshot (U5): its local entities, every heartbeat. Soft state. */
export const presenceEntrySchema = z.object({
  gid: z.string().uuid(),
  name: z.string().regex(entityNamePattern, 'not an entity name'),
  kind: entityKindSchema,
  groups: z.array(z.string().regex(entityNamePattern, 'not a group name')).max(32),
  status: z.string().max(64),
  /** When it was last active on its host (ms; EntityActor.lastActiveAt); a 1.2 peer leaves it out. */
  lastActiveAt: z.number().int().nonnegative().optional(),
  /** Started by its host's spawn (so bridge_stop may end it); earlier peers leave it out. */
  spawned: z.boolean().optional(),
  /**
   * A worker whose agent runs behind an agent host: its delivery path and its agent (1.4;
   * earlier peers leave it out). Not the attach command: it names a socket on that host.
   */
  agent: z
    .object({
      path: nativePathSchema,
      /** The agent as it named itself. */
      agent: agentWords(maxAgentName, 'an agent name'),
      /**
       * While its agent asks its owner (1.5): the request an answer from another host names, and
       * what it asks, so that whoever answers sees what.
       */
      permission: openPermissionSchema
        .extend({ title: agentWords(maxPermissionTitle, 'a permission title') })
        .optional(),
    })
    .optional(),
});
export type PresenceEntry = z.infer<typeof presenceEntrySchema>;

/**
 * A worker's agent as its host announces it: its own words (its name, what it asks) made fit
 * for `presenceEntrySchema` (neutralised and cut), which a peer holds them to.
 */
export function presenceAgentOf(agent: {
  path: NativePath;
  agent: string;
  permission?: OpenPermission | undefined;
}): NonNullable<PresenceEntry['agent']> {
  const cut = (text: string, max: number) => neutraliseLine(text).slice(0, max);
  const { permission } = agent;
  return {
    path: agent.path,
    agent: cut(agent.agent, maxAgentName),
    ...(permission === undefined
      ? {}
      : { permission: { request: permission.request, title: cut(permission.title, maxPermissionTitle) } }),
  };
}

export const presenceSchema = z.object({
  v: z.string().regex(/^\d+\.\d+$/),
  kind: z.literal(WireKind.presence),
  host: z.string().min(1),
  hlc: hlcSchema,
  /** Sent every heartbeat; a receiver expires the host after ttlMs without one. */
  ttlMs: z.number().int().min(1),
  /** The cap its entities' inboxes are declared with (broker.inboxMaxLength); earlier peers leave it out. */
  inboxMaxLength: z.number().int().min(1).optional(),
  /**
   * The sealing key peers are to seal to now (1.6; issue 34), as `keys show` prints it: taken
   * from a PRESENCE whose signature checks with the host's trusted signing key (and held to the
   * key form there), so a rotated key reaches every peer.
   */
  sealingKey: z.string().max(128).optional(),
  entities: z.array(presenceEntrySchema),
});
export type Presence = z.infer<typeof presenceSchema>;

/** How long a host's PRESENCE holds (a heartbeat times the beats it may miss): its `ttlMs`. */
export function presenceTtlMs(broker: { heartbeatMs: number; presenceTtlBeats: number }): number {
  return broker.heartbeatMs * broker.presenceTtlBeats;
}

export function encodePresence(presence: Presence): Buffer {
  return Buffer.from(JSON.stringify(presence), 'utf8');
}

export type DecodedPresence = { ok: true; presence: Presence } | { ok: false; detail: string };

/** What a peer's PRESENCE may be at most (R-H8), from `limits` of the config. */
export interface PresenceLimits {
  maxEntries: number;
  maxBytes: number;
}

/** The bytes a PRESENCE may take per entry it may announce, unless limits.maxPresenceBytes says. */
export const presenceEntryBudgetBytes = 512;

export function presenceLimits(limits: {
  maxPresenceEntries: number;
  maxPresenceBytes?: number | undefined;
}): PresenceLimits {
  return {
    maxEntries: limits.maxPresenceEntries,
    maxBytes: limits.maxPresenceBytes ?? limits.maxPresenceEntries * presenceEntryBudgetBytes,
  };
}

/**
 * Parses a PRESENCE whose size and signature were checked already (the bytes are bounded by
 * `PresenceLimits.maxBytes`). An entry list longer than `maxEntries` is refused before the
 * entries are validated; a refusal's detail is bounded, whatever the input.
 */
export function decodePresence(bytes: Buffer, maxEntries: number): DecodedPresence {
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    return { ok: false, detail: boundedDetail(`not JSON: ${(err as Error).message}`) };
  }
  const entities = (raw as { entities?: unknown } | null)?.entities;
  if (Array.isArray(entities) && entities.length > maxEntries) {
    return {
      ok: false,
      detail: `announces ${entities.length} entities; this gateway takes at most ${maxEntries} (limits.maxPresenceEntries)`,
    };
  }
  const parsed = presenceSchema.safeParse(raw);
  if (!parsed.success) return { ok: false, detail: boundedDetail(describeIssues(parsed.error)) };
  if (isNewerMajor(parsed.data.v, schemaVersion.major)) {
    return { ok: false, detail: `presence schema ${parsed.data.v} is newer than this gateway's` };
  }
  return { ok: true, presence: parsed.data };
}

/** Why a well-formed, correctly signed PRESENCE is still not believed. */
export const PresenceRefusal = {
  /** Stamped beyond the allowed clock skew ahead of this host's clock. */
  clockSkew: 'clock-skew',
  /** Older than its own TTL plus the allowed skew: nothing alive announced it just now. */
  stale: 'stale',
  /** Not newer than the last one seen from that host: the same bytes again, or an older copy. */
  replayed: 'replayed',
} as const;
export type PresenceRefusal = (typeof PresenceRefusal)[keyof typeof PresenceRefusal];

export interface PresenceAgeFacts {
  /** This host's wall clock. */
  now: number;
  /** `security.maxClockSkewMs`. */
  maxSkewMs: number;
  /** The newest HLC seen from the announcing host so far, if any (kept after it expired). */
  lastSeenHlc: string | undefined;
}

export type PresenceAge = { ok: true } | { ok: false; reason: PresenceRefusal; detail: string };

/**
 * Whether a PRESENCE is a live announcement rather than a captured one played back. A snapshot
 * is believed only while its stamp is within its TTL (plus skew) of now, and only when it is
 * newer than every snapshot already taken from that host, so re-publishing a host's bytes can
 * neither keep a stopped host in the roster nor bring an expired one back. Pure.
 */
export function judgePresenceAge(presence: Presence, facts: PresenceAgeFacts): PresenceAge {
  const stamped = decodeHlc(presence.hlc).wall;
  if (stamped > facts.now + facts.maxSkewMs) {
    return {
      ok: false,
      reason: PresenceRefusal.clockSkew,
      detail: `stamped ${Math.round((stamped - facts.now) / 1000)} s in the future (${presence.hlc}), beyond security.maxClockSkewMs`,
    };
  }
  const oldest = facts.now - presence.ttlMs - facts.maxSkewMs;
  if (stamped < oldest) {
    const age = Math.round((facts.now - stamped) / 1000);
    return {
      ok: false,
      reason: PresenceRefusal.stale,
      detail: `stamped ${age} s ago, older than its TTL (${presence.ttlMs} ms) plus security.maxClockSkewMs`,
    };
  }
  if (facts.lastSeenHlc !== undefined && presence.hlc <= facts.lastSeenHlc) {
    return {
      ok: false,
      reason: PresenceRefusal.replayed,
      detail: `stamped ${presence.hlc}, not newer than the last one seen from ${presence.host} (${facts.lastSeenHlc})`,
    };
  }
  return { ok: true };
}
