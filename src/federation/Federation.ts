import type { Config } from '../config/schema.js';
import type { DeadLetterSink } from '../deliver/Delivery.js';
import type { EntityActor } from '../deliver/EntityActor.js';
import type { InboundHandle } from '../deliver/handover.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { RuntimeDeps } from '../kernel/ActorCell.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Sealer } from '../security/messageSealing.js';
import type { Signer } from '../security/messageSigning.js';
import type { SealRecipient } from '../security/sealing.js';
import type { AdmissionLimits } from '../wire/admitInbound.js';
import { decodeEnvelope, encodeEnvelope } from '../wire/codec.js';
import type { DeadLetterReason } from '../wire/deadLetterReason.js';
import {
  BridgeHeader,
  type DeadLetterView,
  type OpenedLetter,
  type RequeueResult,
} from '../wire/deadLetterView.js';
import { byteLength } from '../wire/digest.js';
import {
  broadcastPrefix,
  type Envelope,
  type SpawnHeader,
  sealedSince,
  versionAtLeast,
  WireKind,
} from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { brokerInboxFull, brokerMayDeliver, inboxPrefetch } from '../wire/inboxCap.js';
import { type PresenceEntry, presenceAgentOf } from '../wire/presence.js';
import type { ReceiptSink } from '../wire/receipt.js';
import { openedText } from '../wire/sealedEnvelope.js';
import { BrokerActor } from './BrokerActor.js';
import type { InboundMessage, PublishOutcome } from './brokerMessages.js';
import { DeadLetters, type LatestDeadLetters } from './DeadLetters.js';
import { type Destination, Inbound } from './Inbound.js';
import { type IgnoredPeer, PresenceExchange } from './PresenceExchange.js';
import { RemoteRoster } from './RemoteRoster.js';
import {
  controlKey,
  controlLockSpec,
  controlSpec,
  Exchange,
  inboxLockSpec,
  inboxName,
  inboxSpec,
  messageRoutingKey,
  QueueMode,
  rosterSpec,
} from './topology.js';

/** The part of the gateway's config the federation reads. */
export type FederationConfig = Pick<Config, 'hostId' | 'broker' | 'security' | 'limits' | 'delivery' | 'log'>;

export interface FederationDeps extends RuntimeDeps {
  config: FederationConfig;
  metrics: Metrics;
  /** The local entities, for presence and for routing what arrives. */
  localEntities(): Iterable<EntityActor>;
  findLocal(gid: string): EntityActor | undefined;
  onFatal(err: BridgeError): void;
  /** Signs what is published and verifies what arrives (invariant 6). */
  signer: Signer;
  /** Seals what this gateway publishes and opens what was sealed to it (issue 34). */
  sealer: Sealer;
}

/**
 * What the flows above the federation take from it, handed over by `serve` once they exist: the
 * federation is built first, knowing none of them, and they are built on it (the gateway
 * assembles in dependency order). Nothing arrives before `serve`: the broker is connected
 * after it.
 */
export interface FederationServices {
  /** A SPAWN or STOP for this host, admitted; `inbound` is acked once it is recorded. */
  control(envelope: Envelope, inbound: InboundHandle): void;
  /** A RECEIPT batch for this host, admitted; `inbound` is acked once it is recorded. */
  receipts(envelope: Envelope, inbound: InboundHandle): void;
  /**
   * A SPAWN for this host that did not parse (dead-lettered already), from an authentic
   * requester: it is answered with the refusal, `why` (U4).
   */
  refusedSpawn(request: SpawnHeader, why: string): void;
  /** The broker connection is (back) up: whatever waited for it can go out. */
  connected(): void;
  /**
   * Why an arriving message may not name the message it says it answers (`inReplyTo`), or
   * undefined: a reply may name only a message delivered to its sender.
   */
  refusesReply(envelope: Envelope): string | undefined;
  /** Where the stages of messages dead-lettered before they reached an entity go (R-RC1). */
  receiptSink: ReceiptSink;
  /** Whether a local entity is an agent this host spawned (announced, for the console's Stop). */
  isSpawned(gid: string): boolean;
}

/** Room on the wire around the text: the envelope's other fields. */
const envelopeOverheadBytes = 16 * 1024;

/** What is parsed of an arriving message at all: the text limit plus room for the envelope. */
function maxWireBytes(config: Pick<Config, 'limits'>): number {
  return config.limits.maxTextBytes + envelopeOverheadBytes;
}

/**
 * Everything cross-host, on top of the broker actor: an inbox consumer per local entity that
 * hands arrivals to the entity actors (through `Inbound`), publishing by recipient
 * (invariant 2), presence (U5), broadcast (U8), the control queue, and dead letters with their
 * reason (`DeadLetters`).
 */
export class Federation implements DeadLetterSink {
  readonly broker: BrokerActor;
  readonly roster: RemoteRoster;
  private readonly presence: PresenceExchange;
  private readonly inbound: Inbound;
  private readonly deadLetters: DeadLetters;
  /** Inboxes whose consumer is paused: their entity's local inbox is full (R-H1). */
  private readonly paused = new Set<string>();
  private services: FederationServices | undefined;

  constructor(private readonly deps: FederationDeps) {
    const { config, store, hlc, clock, host, logger, metrics, signer } = deps;
    this.roster = new RemoteRoster(config.hostId, clock, logger, config.broker.retryMaxMs);
    this.broker = new BrokerActor({
      store,
      hlc,
      clock,
      host,
      logger,
      uris: config.broker.uris,
      hostId: config.hostId,
      retryBaseMs: config.broker.retryBaseMs,
      retryMaxMs: config.broker.retryMaxMs,
      heartbeatSeconds: config.broker.heartbeatSeconds,
      connectTimeoutMs: config.broker.connectTimeoutMs,
      lockGraceMs: config.broker.lockGraceMs,
      confirmTimeoutMs: config.broker.confirmTimeoutMs,
      tls: config.broker.tls,
      onFatal: deps.onFatal,
      onState: (state) => {
        const connected = state === 'connected';
        metrics.brokerConnected.set(connected ? 1 : 0);
        this.roster.setReachable(connected);
        if (connected) {
          void this.presence.announce();
          void this.deadLetters.sendKept();
          this.served().connected();
        }
      },
    });
    const broker = this.broker;
    this.deadLetters = new DeadLetters({
      broker,
      hostId: config.hostId,
      hlc,
      clock,
      logger,
      signer,
      store,
      wireBytes: (envelope) => this.wireBytes(envelope, envelope.to),
      openLetter: (content) => this.openLetter(content),
      receipts: { record: (receipt, route) => this.served().receiptSink.record(receipt, route) },
      maxWireBytes: maxWireBytes(config),
      queueMode: config.broker.queueMode,
    });
    this.inbound = new Inbound({
      hlc,
      clock,
      logger,
      metrics,
      signer,
      sealer: deps.sealer,
      deadLetters: this.deadLetters,
      limits: () => this.admissionLimits(),
      livesOn: (gid, signedBy) => this.livesOn(gid, signedBy),
    });
    this.presence = new PresenceExchange({
      broker,
      roster: this.roster,
      config,
      hlc,
      clock,
      logger,
      metrics,
      signer,
      sealer: deps.sealer,
      entries: () => this.presenceEntries(),
      onRosterChanged: () => this.inbound.retryAll(),
    });
  }

  /** Hands the federation the flows built on it; called once, before the broker is connected. */
  serve(services: FederationServices): void {
    this.services = services;
  }

  private served(): FederationServices {
    if (!this.services) throw new Error('Federation.serve was not called before the broker was connected');
    return this.services;
  }

  get hostId(): string {
    return this.deps.config.hostId;
  }

  /** broker.queueMode: the type of the inboxes, control queues and bridge.dlq. */
  get queueMode(): QueueMode {
    return this.deps.config.broker.queueMode;
  }

  /** Declares our consumers and connects. Rejects if the broker refuses one of our inboxes. */
  async start(): Promise<void> {
    const { hostId } = this;
    for (const entity of this.deps.localEntities()) await this.addEntity(entity);
    const control = this.controlDestination();
    const { queueMode } = this.deps.config.broker;
    const quorum = queueMode === QueueMode.quorum;
    await this.broker.consume({
      queue: controlSpec(hostId, queueMode),
      // A quorum queue ignores `exclusive`: its lock queue refuses a second gateway instead.
      lock: quorum ? controlLockSpec(hostId) : undefined,
      prefetch: 10,
      exclusive: !quorum,
      ownChannel: true,
      onMessage: (message) => this.inbound.receive(control, message),
    });
    await this.broker.consume({
      queue: rosterSpec(this.deps.config.broker.deployment, hostId),
      prefetch: 100,
      exclusive: true,
      ownChannel: true,
      onMessage: (message) => this.presence.receive(message),
    });
    await this.broker.start();
    this.presence.startHeartbeat();
  }

  async stop(): Promise<void> {
    this.presence.stop();
    await this.broker.stop();
  }

  /** Starts consuming an entity's inbox (now, and after every reconnect). */
  async addEntity(entity: EntityActor): Promise<void> {
    const { broker } = this.deps.config;
    const quorum = broker.queueMode === QueueMode.quorum;
    await this.broker.consume({
      queue: inboxSpec({
        gid: entity.gid,
        deployment: broker.deployment,
        groups: entity.record.groups,
        refusedGroups: entity.record.refusedGroups ?? [],
        mode: broker.queueMode,
        maxLength: broker.inboxMaxLength,
      }),
      // The lock queue (exclusive to this connection) keeps invariant 1 loud: quorum queues
      // ignore `exclusive`, and a classic inbox whose consumer is paused (full) has none.
      lock: inboxLockSpec(entity.gid),
      prefetch: inboxPrefetch(broker.prefetch, entity.cap, this.deps.config.limits.senderInboxShare),
      paused: this.pausedNow(entity),
      // Quorum queues ignore `exclusive`; the lock queue keeps invariant 1 loud instead.
      exclusive: !quorum,
      onMessage: (message) => this.receiveInbound(entity, message),
    });
    this.presence.announceSoon();
  }

  /**
   * The entity's inbox took or finished messages: pause its consumer while the inbox is full,
   * resume once it has room (src/wire/inboxCap.ts). The gateway acks what it has stored, so
   * this, not the prefetch, keeps a main that never drains from filling the local store.
   */
  inboxLoadChanged(entity: EntityActor): void {
    const pause = !this.mayDeliver(entity);
    if (pause === this.paused.has(entity.gid)) return;
    if (pause) this.paused.add(entity.gid);
    else this.paused.delete(entity.gid);
    this.deps.logger.info(
      { entity: entity.record.name, ...entity.load, paused: pause },
      pause
        ? 'inbox full on this gateway: the broker keeps further messages until it has room'
        : 'inbox has room again: taking messages from the broker',
    );
    void this.broker.setPaused(inboxName(entity.gid), pause);
  }

  /** Whether the entity's consumer should start paused (a full inbox rebuilt at start), recorded. */
  private pausedNow(entity: EntityActor): boolean {
    const pause = !this.mayDeliver(entity);
    if (pause) this.paused.add(entity.gid);
    else this.paused.delete(entity.gid);
    return pause;
  }

  private mayDeliver(entity: EntityActor): boolean {
    const { broker, limits } = this.deps.config;
    const inFlight = inboxPrefetch(broker.prefetch, entity.cap, limits.senderInboxShare);
    return brokerMayDeliver(entity.load, entity.cap, inFlight, !this.paused.has(entity.gid));
  }

  /**
   * Stops consuming an entity's inbox and empties it into the DLQ (reason recipient-gone),
   * then deletes it: nothing left in it is lost.
   */
  async removeEntity(gid: string): Promise<void> {
    this.paused.delete(gid);
    await this.broker.cancel(inboxName(gid));
    await this.deadLetters.emptyInbox(gid);
    this.presence.announceSoon();
  }

  /**
   * Publishes an envelope to its recipient's inbox, wherever it lives (invariant 2): `to` is a
   * routing key of `bridge.msg` (a gid, a broadcast key), or for control the target host id.
   */
  async publishMessage(
    envelope: Envelope,
    to: string,
    exchange: 'msg' | 'control' = 'msg',
  ): Promise<PublishOutcome> {
    const ttl = envelope.expiresAt === undefined ? undefined : envelope.expiresAt - this.deps.clock.now();
    const content = this.wireBytes(envelope, exchange === 'control' ? [to] : to);
    return this.broker.publish({
      exchange: exchange === 'control' ? Exchange.control : Exchange.msg,
      routingKey:
        exchange === 'control' ? controlKey(to) : messageRoutingKey(this.deps.config.broker.deployment, to),
      content,
      messageId: envelope.msgId,
      mandatory: true,
      persistent: true,
      expirationMs: ttl,
      headers: {
        [BridgeHeader.host]: this.hostId,
        [BridgeHeader.trace]: envelope.traceId,
        ...this.deps.signer.headersFor(content),
      },
    });
  }

  /**
   * An envelope's bytes as they cross the broker: its text sealed (security.encryption) to the
   * hosts that may read it. Throws when it cannot be sealed (see `sealedTo`).
   */
  wireBytes(envelope: Envelope, to: string | readonly string[]): Buffer {
    const { sealer } = this.deps;
    if (!sealer.seals(envelope)) return encodeEnvelope(envelope);
    return sealer.sealEnvelope(envelope, this.sealedTo(to));
  }

  /**
   * Whom a message to `to` is sealed to: every trusted host and this one (a broadcast), the named
   * hosts (control), or the one host `to` lives on. Throws, saying what to do, for a gid no host
   * or two hosts announce, a host of a release that cannot open it, or one without a key here.
   */
  private sealedTo(to: string | readonly string[]): SealRecipient[] {
    const { sealer } = this.deps;
    if (typeof to === 'string' && to.startsWith(broadcastPrefix)) return sealer.everyone();
    const hosts = typeof to === 'string' ? this.hostsOf(to) : to;
    if (hosts.length === 0) {
      throw new BridgeError(
        ErrorCode.unknownRecipient,
        `${to} is in no host's roster here: a message's text is sealed to its recipient's host, which must ` +
          'have announced it; check the address, or send once its host is in `agentbridge roster`',
      );
    }
    if (hosts.length > 1) {
      throw new BridgeError(
        ErrorCode.ambiguousRecipient,
        `${to} is announced by ${hosts.join(' and ')}: a gid lives on one host, so its text is sealed to none of them; ` +
          'find out which host is wrong (`agentbridge roster`) and stop trusting it (`agentbridge trust remove`)',
      );
    }
    const older = hosts.find((host) => !this.readsSealed(host));
    if (older !== undefined) {
      throw new BridgeError(
        ErrorCode.badConfig,
        `${older} runs a release that cannot open sealed messages (its PRESENCE is schema ` +
          `${this.roster.versionOf(older)}): upgrade it, or set security.encryption: off on this gateway until then`,
      );
    }
    const { recipients, missing } = sealer.recipients(hosts);
    const host = missing[0];
    if (host !== undefined) {
      throw new BridgeError(
        ErrorCode.keyMissing,
        `cannot seal to ${missing.join(', ')}: this gateway's trust store has no sealing key of ${host} ` +
          `(security.encryption is required): on ${host} run \`agentbridge keys show\`, then here ` +
          `\`agentbridge trust add ${host} <what it printed>\``,
      );
    }
    return recipients;
  }

  /**
   * A dead letter as the operator reads it here: a sealed one opened with this gateway's keys
   * (the text shows only when it was sealed to this host), or why it did not open.
   */
  private openLetter(content: Buffer): OpenedLetter | undefined {
    const decoded = decodeEnvelope(content, maxWireBytes(this.deps.config));
    if (!decoded.ok || !decoded.sealed) return undefined;
    const { sealed, aad, size } = decoded.sealed;
    const to = sealed.recipients.map((recipient) => recipient.host);
    const text = openedText(this.deps.sealer.open(sealed, aad), size);
    if (!text.ok) {
      return {
        body: content.toString('utf8'),
        sealed: { to, opened: false, why: `${text.reason}: ${text.detail}` },
      };
    }
    return { body: JSON.stringify({ ...decoded.envelope, text: text.text }), sealed: { to, opened: true } };
  }

  /** Whether `host` opens sealed envelopes, as far as its PRESENCE says (a host not in the roster: yes). */
  private readsSealed(host: string): boolean {
    const version = this.roster.versionOf(host);
    return version === undefined || versionAtLeast(version, sealedSince);
  }

  /**
   * The hosts entity `gid` lives on: this one, those whose PRESENCE lists it, or the one that
   * last announced it (`RemoteRoster.hostsOfGid`). More than one is a conflict a message is not
   * sealed into.
   */
  hostsOf(gid: string): string[] {
    if (this.deps.findLocal(gid) !== undefined) return [this.hostId];
    return this.roster.hostsOfGid(gid);
  }

  /** Hosts whose announcements this gateway ignores (untrusted, clock off, …), with why. */
  ignoredPeers(): IgnoredPeer[] {
    return this.presence.ignored();
  }

  /** The roster's local entries, as announced. */
  presenceEntries(): PresenceEntry[] {
    return [...this.deps.localEntities()].map((entity) => ({
      gid: entity.gid,
      name: entity.record.name,
      kind: entity.record.kind,
      groups: entity.record.groups,
      status: entity.status,
      ...(entity.lastActiveAt === undefined ? {} : { lastActiveAt: entity.lastActiveAt }),
      ...(this.served().isSpawned(entity.gid) ? { spawned: true } : {}),
      ...(entity.agent === undefined ? {} : { agent: presenceAgentOf(entity.agent) }),
    }));
  }

  /**
   * The broker nacked a publish to entity `gid`'s quorum inbox: whether the inbox is full
   * (brokerInboxFull, against the cap its host announced, or this gateway's own when the host
   * did not say). One that is not was a queue without a leader, and publishing moves to a new
   * channel (BrokerActor.renewPublishChannel): RabbitMQ can leave a channel refusing that queue
   * after a leader is back.
   */
  async nackedInboxFull(gid: string): Promise<boolean> {
    const depth = await this.broker.queueDepth(inboxName(gid));
    const cap = this.roster.inboxMaxLength(gid) ?? this.deps.config.broker.inboxMaxLength;
    const full = brokerInboxFull(depth, cap);
    if (!full) void this.broker.renewPublishChannel();
    return full;
  }

  /** A message of this host's refused before it left (no room) goes to the DLQ with its reason. */
  deadLetter(envelope: Envelope, reason: DeadLetterReason, detail: string | null): void {
    this.deadLetters.deadLetter(envelope, reason, detail);
  }

  /** DeadLetterSink: publishes the cross-host dead letters the store's outbox holds. */
  forwardKept(): void {
    this.deadLetters.forwardKept();
  }

  /** Lists the DLQ without consuming it. */
  listDeadLetters(max: number): Promise<DeadLetterView[]> {
    return this.deadLetters.list(max);
  }

  /** The newest dead letters, re-read when the DLQ changed (see `DeadLetters.latest`). */
  latestDeadLetters(max: number, scan: number, maxAgeMs: number): Promise<LatestDeadLetters> {
    return this.deadLetters.latest(max, scan, maxAgeMs);
  }

  /** Moves dead letters back to their recipients' inboxes (see `DeadLetters.requeue`). */
  requeueDeadLetters(msgId: string | undefined, force: boolean): Promise<RequeueResult> {
    return this.deadLetters.requeue(msgId, force);
  }

  /** The inbox consumer's entry point: every message the broker hands us for `entity` (`Inbound`). */
  receiveInbound(entity: EntityActor, message: InboundMessage): void {
    this.inbound.receive(this.inboxOf(entity), message);
  }

  private inboxOf(entity: EntityActor): Destination {
    return {
      queue: inboxName(entity.gid),
      id: entity.gid,
      target: { kind: 'inbox', gid: entity.gid, name: entity.record.name, groups: entity.record.groups },
      refusesReply: (envelope) => this.served().refusesReply(envelope),
      refusesSender: (envelope) => {
        const share = entity.senderShareRefusal(envelope, byteLength(envelope.text));
        return share === undefined
          ? undefined
          : `${entity.record.name}'s inbox takes no more from its sender now: ${share}`;
      },
      accept: (envelope, message) =>
        entity.accept(
          envelope.kind === WireKind.broadcast ? envelope : { ...envelope, to: entity.gid },
          message,
        ),
    };
  }

  private controlDestination(): Destination {
    const host = this.hostId;
    return {
      queue: controlSpec(host).name,
      id: `control.${host}`,
      target: { kind: 'control', host },
      accept: (envelope, message) => {
        if (envelope.kind === WireKind.receipt) this.served().receipts(envelope, message);
        else this.served().control(envelope, message);
      },
      answerSpawn: (request, why) => this.served().refusedSpawn(request, why),
    };
  }

  private admissionLimits(): AdmissionLimits & { unknownSenderGraceMs: number } {
    const { limits, security, delivery } = this.deps.config;
    return {
      signingRequired: this.deps.signer.enabled,
      sealingRequired: this.deps.sealer.required,
      maxWireBytes: maxWireBytes(this.deps.config),
      maxTextBytes: limits.maxTextBytes,
      maxClockSkewMs: security.maxClockSkewMs,
      ttlMs: delivery.ttlMs,
      unknownSenderGraceMs: security.unknownSenderGraceMs,
    };
  }

  /** Whether the roster places entity `gid` on `host` (invariant 6: the sender lives on the signer). */
  private livesOn(gid: string, host: string): boolean {
    // A gateway writes as itself (SPAWN_RESULT, TOO_LATE): only its own key can sign that.
    if (gid === gatewayAddress(host).gid) return true;
    if (host === this.hostId) return this.deps.findLocal(gid) !== undefined;
    return this.roster.find(gid).some((entry) => entry.host === host);
  }
}
