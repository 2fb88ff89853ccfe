/**
 * Which MCP sessions to close. Every session holds a transport and an MCP server (about 190 KB),
 * so a client that initializes without ever closing would otherwise grow the gateway without
 * bound. Pure: the session table asks, this answers.
 */

/** What the decision needs to know of one session. */
export interface SessionUse {
  readonly id: string;
  /** The entity whose token opened it: the cap is per entity. */
  readonly entity: string;
  /** When a request on it last started or ended. */
  readonly lastUsedAt: number;
  /** Requests still open on it (a tool call waiting for its reply, the client's GET stream). */
  readonly inFlight: number;
}

export interface EvictionPolicy {
  readonly now: number;
  /** A session with nothing open and no request for this long is closed. */
  readonly idleMs: number;
  /** Most sessions one entity may hold; beyond it the least recently used go. */
  readonly maxPerEntity: number;
}

export const EvictionReason = {
  /** Nothing open on it and no request for `idleMs`: its client has gone. */
  idle: 'idle',
  /** Its entity opened more than `maxPerEntity` sessions and this one was used longest ago. */
  overCap: 'over-cap',
} as const;
export type EvictionReason = (typeof EvictionReason)[keyof typeof EvictionReason];

export interface Eviction {
  readonly id: string;
  readonly entity: string;
  readonly reason: EvictionReason;
}

/**
 * The sessions to close, given in creation order: first the idle ones, then, per entity, the
 * least recently used beyond the cap. An open request keeps a session from counting as idle
 * (a long ask, or the GET stream nudges arrive on), but not from the cap: a client that opens
 * sessions without end loses its oldest even if it holds them open. Ties in `lastUsedAt` go to
 * the older session, so the one just initialized is the last to be chosen.
 */
export function chooseEvictions(sessions: readonly SessionUse[], policy: EvictionPolicy): Eviction[] {
  const evictions: Eviction[] = [];
  const kept = new Map<string, SessionUse[]>();
  for (const session of sessions) {
    if (session.inFlight === 0 && policy.now - session.lastUsedAt >= policy.idleMs) {
      evictions.push({ id: session.id, entity: session.entity, reason: EvictionReason.idle });
      continue;
    }
    const mine = kept.get(session.entity);
    if (mine) mine.push(session);
    else kept.set(session.entity, [session]);
  }
  for (const [entity, mine] of kept) {
    const excess = mine.length - policy.maxPerEntity;
    if (excess <= 0) continue;
    // Array.prototype.sort is stable: equal times keep creation order, oldest first.
    const leastRecent = [...mine].sort((a, b) => a.lastUsedAt - b.lastUsedAt).slice(0, excess);
    for (const session of leastRecent)
      evictions.push({ id: session.id, entity, reason: EvictionReason.overCap });
  }
  return evictions;
}
