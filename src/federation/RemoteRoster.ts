import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import type { Presence, PresenceEntry } from '../wire/presence.js';

/** One entity in the union view (U5). */
export interface RosterEntry extends PresenceEntry {
  host: string;
  depth?: number;
}

interface RemoteHost {
  /** The schema version its PRESENCE was written in (what it can take). */
  version: string;
  entities: PresenceEntry[];
  /** Its entities by gid and by name, built once per PRESENCE: a send looks one up, never the list. */
  byGid: Map<string, PresenceEntry>;
  byName: Map<string, PresenceEntry[]>;
  inboxMaxLength: number | undefined;
  expiresAt: number;
  ttlMs: number;
}

export const unknownStatus = 'unknown';

/**
 * The remote half of the roster: what other gateways announced, expiring after their TTL.
 * Presence is soft state (invariant 4): nothing here is persisted. While the broker is
 * unreachable, remote entries read as `unknown` (R-H5).
 */
export class RemoteRoster {
  private readonly hosts = new Map<string, RemoteHost>();
  /** Host → newest PRESENCE hlc taken; outlives the host's expiry (one short string per host). */
  private readonly lastSeen = new Map<string, string>();
  /**
   * Entity gid → the host that last announced it; outlives the host's expiry, so a message to an
   * entity whose host is cut off for a while is still sealed to that host and waits in its inbox.
   */
  private readonly lastHost = new Map<string, string>();
  private reachable = false;
  /** When the broker last became reachable: until a heartbeat round has passed, the view is still filling. */
  private reachableSince: number | undefined;

  constructor(
    private readonly selfHost: string,
    private readonly clock: Clock,
    private readonly logger: Logger,
    /**
     * How long after this gateway is back on the broker a host may stay silent beyond its TTL:
     * a peer that lost the broker when this gateway did reconnects on its own backoff (up to
     * broker.retryMaxMs) before it announces itself again.
     */
    private readonly reconnectGraceMs = 0,
  ) {}

  /**
   * Takes a PRESENCE snapshot from another host. A snapshot not newer (by hlc) than the last one
   * taken from that host is ignored, also after the host expired: the newest stamp seen is kept
   * for as long as this gateway runs, so a captured snapshot played back cannot revive a host.
   * Returns whether the snapshot was taken.
   */
  apply(presence: Presence): boolean {
    if (presence.host === this.selfHost) return false;
    const last = this.lastSeen.get(presence.host);
    if (last !== undefined && presence.hlc <= last) return false;
    this.lastSeen.set(presence.host, presence.hlc);
    for (const entity of presence.entities) this.lastHost.set(entity.gid, presence.host);
    if (!this.hosts.has(presence.host))
      this.logger.info({ peer: presence.host, entities: presence.entities.length }, 'host joined the roster');
    const byName = new Map<string, PresenceEntry[]>();
    for (const entity of presence.entities) {
      const named = byName.get(entity.name);
      if (named) named.push(entity);
      else byName.set(entity.name, [entity]);
    }
    this.hosts.set(presence.host, {
      version: presence.v,
      entities: presence.entities,
      byGid: new Map(presence.entities.map((entity) => [entity.gid, entity])),
      byName,
      inboxMaxLength: presence.inboxMaxLength,
      expiresAt: this.clock.now() + presence.ttlMs,
      ttlMs: presence.ttlMs,
    });
    return true;
  }

  /** The newest PRESENCE stamp taken from `host`, whether or not it is still in the roster. */
  lastSeenHlc(host: string): string | undefined {
    return this.lastSeen.get(host);
  }

  /**
   * Whether the broker can currently be reached. Remote statuses are only known then; while it
   * is not, remote hosts read as unknown rather than expire, and they get a fresh TTL when it
   * comes back (their silence was ours), and the reconnect grace (they may have lost it too).
   */
  setReachable(reachable: boolean): void {
    if (reachable && !this.reachable) {
      const now = this.clock.now();
      for (const entry of this.hosts.values()) entry.expiresAt = now + entry.ttlMs + this.reconnectGraceMs;
      this.reachableSince = now;
    }
    this.reachable = reachable;
  }

  /**
   * True while the view may be missing hosts that exist: the broker is away, or it came back
   * less than `windowMs` ago (presence is soft state; a restarted gateway starts empty).
   */
  filling(windowMs: number): boolean {
    if (!this.reachable || this.reachableSince === undefined) return true;
    return this.clock.now() - this.reachableSince < windowMs;
  }

  /** Drops hosts whose presence expired (only while the broker is reachable). */
  expire(): void {
    if (!this.reachable) return;
    const now = this.clock.now();
    for (const [host, entry] of this.hosts) {
      if (entry.expiresAt <= now) {
        this.hosts.delete(host);
        this.logger.warn({ peer: host }, 'host expired from the roster (no presence within its TTL)');
      }
    }
  }

  entries(): RosterEntry[] {
    this.expire();
    const out: RosterEntry[] = [];
    for (const [host, entry] of this.hosts) {
      for (const e of entry.entities) out.push(this.entryOf(host, e));
    }
    return out;
  }

  private entryOf(host: string, entity: PresenceEntry): RosterEntry {
    return { ...entity, host, status: this.reachable ? entity.status : unknownStatus };
  }

  /** The inbox cap the host of entity `gid` announced, if it is in the roster and said. */
  inboxMaxLength(gid: string): number | undefined {
    for (const entry of this.hosts.values()) {
      if (entry.byGid.has(gid)) return entry.inboxMaxLength;
    }
    return undefined;
  }

  /**
   * The hosts entity `gid` lives on, by its gid alone (never a name that looks like one): those
   * whose PRESENCE lists it now, or else the one that last announced it (since expired).
   */
  hostsOfGid(gid: string): string[] {
    this.expire();
    const now = [...this.hosts].filter(([, entry]) => entry.byGid.has(gid)).map(([host]) => host);
    if (now.length > 0) return now;
    const last = this.lastHost.get(gid);
    return last === undefined ? [] : [last];
  }

  /** The schema version of `host`'s last PRESENCE, while it is in the roster. */
  versionOf(host: string): string | undefined {
    return this.hosts.get(host)?.version;
  }

  hostIds(): string[] {
    return [...this.hosts.keys()];
  }

  /** Finds a remote entity by gid, `name@host`, or a bare name unique among remote hosts. */
  find(address: string): RosterEntry[] {
    this.expire();
    const byGid = [...this.hosts].flatMap(([host, entry]) => {
      const entity = entry.byGid.get(address);
      return entity ? [this.entryOf(host, entity)] : [];
    });
    if (byGid.length > 0) return byGid;
    const at = address.lastIndexOf('@');
    if (at > 0) {
      const host = address.slice(at + 1);
      const named = this.hosts.get(host)?.byName.get(address.slice(0, at)) ?? [];
      return named.map((entity) => this.entryOf(host, entity));
    }
    return [...this.hosts].flatMap(([host, entry]) =>
      (entry.byName.get(address) ?? []).map((entity) => this.entryOf(host, entity)),
    );
  }
}
