import type { Config } from '../config/schema.js';
import type { Clock } from '../kernel/clock.js';
import type { Logger } from '../log/logger.js';
import { RepeatLimiter } from '../log/RepeatLimiter.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Sealer } from '../security/messageSealing.js';
import type { Signer } from '../security/messageSigning.js';
import { type SealingKeyString, sealingKeySchema } from '../security/publicKey.js';
import { schemaVersionString, WireKind } from '../wire/envelope.js';
import type { Hlc } from '../wire/hlc.js';
import {
  decodePresence,
  encodePresence,
  judgePresenceAge,
  type PresenceEntry,
  presenceLimits,
  presenceTtlMs,
} from '../wire/presence.js';
import { boundedDetail, oversized } from '../wire/wireSize.js';
import type { BrokerActor } from './BrokerActor.js';
import type { InboundMessage } from './brokerMessages.js';
import type { RemoteRoster } from './RemoteRoster.js';
import { Exchange, rosterKey, rosterKeyHost } from './topology.js';

export interface PresenceExchangeDeps {
  broker: BrokerActor;
  roster: RemoteRoster;
  config: Pick<Config, 'hostId' | 'broker' | 'security' | 'limits' | 'log'>;
  hlc: Hlc;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  signer: Signer;
  /** Announces this gateway's sealing key, and learns each peer's from its PRESENCE. */
  sealer: Sealer;
  /** The local entities as announced. */
  entries(): PresenceEntry[];
  /** A PRESENCE was taken into the roster: senders it announced may be what arrivals wait for. */
  onRosterChanged(): void;
}

/** How long a change waits for others before it is announced (U5). */
const announceCoalesceMs = 50;

/** A host whose announcements this gateway ignores, and why (what `agentbridge doctor` reads). */
export interface IgnoredPeer {
  host: string;
  reason: string;
  detail: string;
  count: number;
  lastAt: number;
}

/** Hosts remembered with their last refusal; the oldest goes first beyond this many. */
const maxIgnoredPeers = 256;

/**
 * PRESENCE (U5), both ways: this gateway's snapshot every heartbeat and soon after a change,
 * and other gateways' snapshots into the remote roster once signature and age check out.
 */
export class PresenceExchange {
  private readonly ignoredPeers = new Map<string, IgnoredPeer>();
  private heartbeat: unknown;
  private announceTimer: unknown;
  /** This gateway's own snapshot is past what peers with its limits take: warned once until it fits. */
  private ownTooLarge = false;
  /** An untrusted or misconfigured peer announces every heartbeat: one line per peer and reason a window. */
  private readonly ignoredLog: RepeatLimiter;

  constructor(private readonly deps: PresenceExchangeDeps) {
    this.ignoredLog = new RepeatLimiter(deps.config.log.repeatWindowMs);
  }

  /** Announces every `broker.heartbeatMs` until stopped. */
  startHeartbeat(): void {
    const { clock, config } = this.deps;
    const beat = () => {
      this.heartbeat = clock.setTimeout(beat, config.broker.heartbeatMs);
      void this.announce();
    };
    this.heartbeat = clock.setTimeout(beat, config.broker.heartbeatMs);
  }

  stop(): void {
    const { clock } = this.deps;
    if (this.heartbeat !== undefined) clock.clearTimeout(this.heartbeat);
    if (this.announceTimer !== undefined) clock.clearTimeout(this.announceTimer);
    this.heartbeat = undefined;
    this.announceTimer = undefined;
  }

  /**
   * Announces the change soon, once for a burst: registering many entities one after another
   * sends one snapshot, not one per entity (each snapshot lists them all).
   */
  announceSoon(): void {
    if (this.announceTimer !== undefined) return;
    this.announceTimer = this.deps.clock.setTimeout(() => {
      this.announceTimer = undefined;
      void this.announce();
    }, announceCoalesceMs);
  }

  /** Sends this gateway's PRESENCE snapshot now (also every heartbeat). */
  async announce(): Promise<void> {
    const { broker, config, logger } = this.deps;
    if (!broker.connected) return;
    const presence = {
      v: schemaVersionString,
      kind: WireKind.presence,
      host: config.hostId,
      hlc: this.deps.hlc.tick(),
      ttlMs: presenceTtlMs(config.broker),
      inboxMaxLength: config.broker.inboxMaxLength,
      ...sealingKeyField(this.deps.sealer.currentKey()),
      entities: this.deps.entries(),
    };
    const content = encodePresence(presence);
    this.checkOwnSize(content, presence.entities.length);
    await broker
      .publish({
        exchange: Exchange.roster,
        routingKey: rosterKey(config.broker.deployment, config.hostId),
        content,
        headers: this.deps.signer.headersFor(content),
        messageId: `presence/${config.hostId}/${presence.hlc}`,
        mandatory: false,
        persistent: false,
        expirationMs: presence.ttlMs,
      })
      .catch((err: unknown) =>
        // The next heartbeat announces again; peers keep this host until its TTL runs out.
        logger.warn({ err }, 'could not announce this gateway (PRESENCE); the next heartbeat tries again'),
      );
  }

  /**
   * The roster queue's consumer: a snapshot from another gateway. Checked in the order that
   * reads least of someone else's bytes first (R-H8): size, the signature over the raw bytes,
   * and only then the JSON; a refusal is logged with its reason, never with the payload.
   */
  receive(message: InboundMessage): void {
    const { config, roster, signer } = this.deps;
    message.ack();
    const limits = presenceLimits(config.limits);
    const tooLarge = oversized(message.content, limits.maxBytes, 'limits.maxPresenceBytes');
    if (tooLarge !== undefined) {
      this.ignore('oversized', tooLarge, message.routingKey);
      return;
    }
    const signature = signer.verify(message.content, message.headers);
    if (!signature.ok) {
      this.ignore('bad-signature', signature.detail, message.routingKey);
      return;
    }
    const decoded = decodePresence(message.content, limits.maxEntries);
    if (!decoded.ok) {
      this.ignore('malformed', decoded.detail, message.routingKey);
      return;
    }
    const presence = decoded.presence;
    if (presence.host === config.hostId) return;
    if (signer.enabled && signature.signer !== presence.host) {
      // A host may only announce its own entities (invariant 6).
      this.ignore(
        'wrong-host',
        `announces host ${presence.host} but was signed by ${signature.signer}`,
        message.routingKey,
      );
      return;
    }
    const age = judgePresenceAge(presence, {
      now: this.deps.clock.now(),
      maxSkewMs: config.security.maxClockSkewMs,
      lastSeenHlc: roster.lastSeenHlc(presence.host),
    });
    if (!age.ok) {
      this.ignore(age.reason, age.detail, message.routingKey);
      return;
    }
    this.deps.hlc.receive(presence.hlc);
    // Its signature checked with the host's trusted key (or signing is off, and so is sealing).
    if (signer.enabled && presence.sealingKey !== undefined)
      this.learnSealingKey(presence.host, presence.sealingKey);
    roster.apply(presence);
    this.deps.onRosterChanged();
  }

  private learnSealingKey(host: string, announced: string): void {
    const key = sealingKeySchema.safeParse(announced);
    if (key.success) this.deps.sealer.learn(host, key.data);
    else
      this.deps.logger.warn(
        { peer: host },
        'a PRESENCE announces a sealing key that is not one; kept the one known',
      );
  }

  /** The hosts whose announcements were ignored, each with its latest reason. */
  ignored(): IgnoredPeer[] {
    return [...this.ignoredPeers.values()];
  }

  private ignore(reason: string, detail: string, routingKey: string): void {
    this.deps.metrics.presenceIgnored.inc({ reason });
    const host = rosterKeyHost(this.deps.config.broker.deployment, routingKey);
    if (host !== undefined) {
      const key = boundedDetail(host);
      const seen = this.ignoredPeers.get(key);
      this.ignoredPeers.delete(key);
      this.ignoredPeers.set(key, {
        host: key,
        reason,
        detail: boundedDetail(detail),
        count: (seen?.count ?? 0) + 1,
        lastAt: this.deps.clock.now(),
      });
      if (this.ignoredPeers.size > maxIgnoredPeers) {
        this.ignoredPeers.delete(this.ignoredPeers.keys().next().value as string);
      }
    }
    const admitted = this.ignoredLog.admit(`${reason} ${routingKey}`, this.deps.clock.now());
    if (!admitted.write) return;
    this.deps.logger.warn(
      {
        reason,
        detail: boundedDetail(detail),
        routingKey: boundedDetail(routingKey),
        ...(admitted.suppressed > 0 && { alsoIgnoredSinceLastLine: admitted.suppressed }),
      },
      'ignored a PRESENCE announcement',
    );
  }

  /** Peers with this gateway's limits would ignore its snapshot: say so, once, with the fix. */
  private checkOwnSize(content: Buffer, entries: number): void {
    const limits = presenceLimits(this.deps.config.limits);
    const tooLarge = content.length > limits.maxBytes || entries > limits.maxEntries;
    if (tooLarge && !this.ownTooLarge) {
      this.deps.logger.error(
        { bytes: content.length, entries, ...limits },
        'this gateway announces more than limits.maxPresenceEntries / limits.maxPresenceBytes allow: ' +
          'peers with those limits ignore its PRESENCE; raise them on every gateway, or host fewer entities here',
      );
    }
    this.ownTooLarge = tooLarge;
  }
}

function sealingKeyField(key: SealingKeyString | undefined): { sealingKey?: SealingKeyString } {
  return key === undefined ? {} : { sealingKey: key };
}
