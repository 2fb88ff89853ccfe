import {
  controlKey,
  controlSpec,
  dlqName,
  Exchange,
  inboxLockName,
  inboxLockSpec,
  inboxName,
  inboxSpec,
  QueueMode,
  rosterKey,
  rosterSpec,
} from '../broker/topology.js';
import type { Clock } from '../clock/clock.js';
import type { Hlc } from '../clock/hlc.js';
import { decodeHlc } from '../clock/hlc.js';
import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Logger } from '../log/logger.js';
import type { DeadLetterReason } from '../machines/deliveryMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import type { RuntimeDeps } from '../runtime/actorCell.js';
import { SignatureHeader, type Signer } from '../security/messageSigning.js';
import { decodeEnvelope, encodeEnvelope } from '../wire/codec.js';
import { byteLength } from '../wire/digest.js';
import { type Envelope, type SpawnHeader, schemaVersionString } from '../wire/envelope.js';
import { gatewayAddress } from '../wire/gatewayAddress.js';
import { brokerMayDeliver, inboxPrefetch } from '../wire/inboxCap.js';
import { decodePresence, encodePresence, judgePresenceAge, type PresenceEntry } from '../wire/presence.js';
import {
  BrokerActor,
  type BrokerChannel,
  type InboundMessage,
  type PublishOutcome,
  type PublishRequest,
} from './brokerActor.js';
import type { DeadLetterSink } from './delivery.js';
import type { EntityActor } from './entityActor.js';
import type { InboundHandle } from './handover.js';
import { RemoteRoster } from './roster.js';

export interface FederationDeps extends RuntimeDeps {
  config: Config;
  metrics: Metrics;
  hlc: Hlc;
  clock: Clock;
  logger: Logger;
  /** The local entities, for presence and for routing what arrives. */
  localEntities(): Iterable<EntityActor>;
  findLocal(gid: string): EntityActor | undefined;
  onFatal(err: BridgeError): void;
  /** Signs what is published and verifies what arrives (invariant 6). */
  signer: Signer;
  /** A SPAWN, STOP or RECEIPT for this host, admitted; `inbound` is acked once it is recorded. */
  onControl(envelope: Envelope, inbound: InboundHandle): void;
  /**
   * A SPAWN for this host that did not parse (dead-lettered already), from an authentic
   * requester: it is answered with the refusal, `why` (U4).
   */
  onRefusedSpawn(request: SpawnHeader, why: string): void;
  /** The broker connection is (back) up: whatever waited for it can go out. */
  onConnected?: (() => void) | undefined;
  /**
   * Why an arriving message may not name the message it says it answers (`inReplyTo`), or
   * undefined: a reply may name only a message delivered to its sender.
   */
  refusesReply?: ((envelope: Envelope) => string | undefined) | undefined;
}

/** Where an arrival goes once admitted: an entity's inbox, or this gateway's control queue. */
interface Destination {
  readonly queue: string;
  /** Groups arrivals for the unknown-sender grace, per destination and sender. */
  readonly id: string;
  /** True for a copy of one's own broadcast, which is acked and dropped. */
  ownCopy(envelope: Envelope): boolean;
  /** Why the message is not for this destination, or undefined. */
  misdirected(envelope: Envelope): string | undefined;
  accept(envelope: Envelope, message: InboundMessage): void;
  /** A SPAWN refused for its content, dead-lettered; the control queue answers its requester. */
  refusedSpawn?(request: SpawnHeader, why: string): void;
}

/** Headers a dead letter carries into `bridge.dlq`. */
export const DeadLetterHeader = {
  reason: 'x-bridge-reason',
  detail: 'x-bridge-detail',
  queue: 'x-bridge-queue',
  routingKey: 'x-bridge-routing-key',
  host: 'x-bridge-host',
  at: 'x-bridge-at',
} as const;

export interface DeadLetterView {
  msgId: string | undefined;
  reason: string;
  detail: string;
  queue: string;
  routingKey: string;
  host: string;
  at: string;
  body: string;
}

/**
 * Everything cross-host, on top of the broker actor: an inbox consumer per local entity that
 * hands arrivals to the entity actors, publishing by recipient (invariant 2), presence (U5),
 * broadcast (U8), the control queue, and dead letters with their reason.
 */
export class Federation implements DeadLetterSink {
  readonly broker: BrokerActor;
  readonly roster: RemoteRoster;
  private heartbeat: ReturnType<typeof setInterval> | undefined;
  private announceTimer: ReturnType<typeof setTimeout> | undefined;
  /** Per inbox and sender: arrivals held in order behind one whose sender is not in the roster yet. */
  private readonly waiting = new Map<string, { destination: Destination; arrivals: Arrival[] }>();
  private readonly maxWireBytes: number;
  /** Inboxes whose consumer is paused: their entity's local inbox is full (R-H1). */
  private readonly paused = new Set<string>();
  /** Dead letters that could not reach bridge.dlq yet (no broker): sent on the next connect. */
  private readonly unsentDeadLetters: Array<() => Promise<boolean>> = [];

  constructor(private readonly deps: FederationDeps) {
    const { config, logger, clock } = deps;
    this.roster = new RemoteRoster(config.hostId, clock, logger);
    this.maxWireBytes = config.limits.maxTextBytes + 16 * 1024;
    this.broker = new BrokerActor({
      ...deps,
      uri: config.broker.uri as string,
      hostId: config.hostId,
      retryBaseMs: config.broker.retryBaseMs,
      retryMaxMs: config.broker.retryMaxMs,
      heartbeatSeconds: config.broker.heartbeatSeconds,
      connectTimeoutMs: config.broker.connectTimeoutMs,
      onFatal: deps.onFatal,
      onState: (state) => {
        const connected = state === 'connected';
        deps.metrics.brokerConnected.set(connected ? 1 : 0);
        this.roster.setReachable(connected);
        if (connected) {
          void this.announce();
          void this.sendDeadLettersKept();
          deps.onConnected?.();
        }
      },
    });
  }

  get hostId(): string {
    return this.deps.config.hostId;
  }

  /** Declares our consumers and connects. Rejects if the broker refuses one of our inboxes. */
  async start(): Promise<void> {
    const { config } = this.deps;
    for (const entity of this.deps.localEntities()) await this.addEntity(entity);
    const control = this.controlDestination();
    await this.broker.consume({
      queue: controlSpec(config.hostId),
      prefetch: 10,
      exclusive: true,
      onMessage: (message) => this.receive(control, message),
    });
    await this.broker.consume({
      queue: rosterSpec(config.hostId),
      prefetch: 100,
      exclusive: true,
      onMessage: (message) => this.onPresence(message),
    });
    await this.broker.start();
    this.heartbeat = setInterval(() => void this.announce(), config.broker.heartbeatMs);
    this.heartbeat.unref();
  }

  async stop(): Promise<void> {
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.announceTimer) clearTimeout(this.announceTimer);
    await this.broker.stop();
  }

  /** Starts consuming an entity's inbox (now, and after every reconnect). */
  async addEntity(entity: EntityActor): Promise<void> {
    const { config } = this.deps;
    const quorum = config.broker.queueMode === QueueMode.quorum;
    await this.broker.consume({
      queue: inboxSpec({
        gid: entity.gid,
        groups: entity.record.groups,
        refusedGroups: entity.record.refusedGroups ?? [],
        mode: config.broker.queueMode,
        maxLength: config.broker.inboxMaxLength,
      }),
      // The lock queue (exclusive to this connection) keeps invariant 1 loud: quorum queues
      // ignore `exclusive`, and a classic inbox whose consumer is paused (full) has none.
      lock: inboxLockSpec(entity.gid),
      prefetch: inboxPrefetch(config.broker.prefetch, entity.cap),
      paused: this.pausedNow(entity),
      // Quorum queues ignore `exclusive`; the lock queue keeps invariant 1 loud instead.
      exclusive: !quorum,
      onMessage: (message) => this.receiveInbound(entity, message),
    });
    this.announceSoon();
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
    const inFlight = inboxPrefetch(this.deps.config.broker.prefetch, entity.cap);
    return brokerMayDeliver(entity.load, entity.cap, inFlight, !this.paused.has(entity.gid));
  }

  /**
   * Stops consuming an entity's inbox and empties it into the DLQ (reason recipient-gone),
   * then deletes it: nothing left in it is lost.
   */
  async removeEntity(gid: string): Promise<void> {
    const queue = inboxName(gid);
    this.paused.delete(gid);
    await this.broker.cancel(queue);
    if (this.broker.connected) {
      await this.broker
        .withChannel(async (channel) => {
          for (;;) {
            const message = await channel.get(queue, { noAck: false });
            if (message === false) break;
            const outcome = await this.publishDeadLetter(message.content, {
              reason: 'recipient-gone',
              detail: 'the entity was deregistered',
              queue,
              routingKey: message.fields.routingKey,
              messageId: message.properties.messageId as string | undefined,
            });
            if (!outcome.ok) break;
            channel.ack(message);
          }
          await channel.deleteQueue(queue, { ifEmpty: true });
          await channel.deleteQueue(inboxLockName(gid));
        })
        .catch((err: unknown) =>
          this.deps.logger.warn({ err, queue }, 'could not empty the inbox of a removed entity'),
        );
    }
    this.announceSoon();
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
    const content = encodeEnvelope(envelope);
    return this.broker.publish({
      exchange: exchange === 'control' ? Exchange.control : Exchange.msg,
      routingKey: exchange === 'control' ? controlKey(to) : to,
      content,
      messageId: envelope.msgId,
      mandatory: true,
      persistent: true,
      expirationMs: ttl,
      headers: {
        'x-bridge-host': this.hostId,
        'x-bridge-trace': envelope.traceId,
        ...this.deps.signer.headersFor(content),
      },
    });
  }

  /** The roster's local entries, as announced. */
  presenceEntries(): PresenceEntry[] {
    return [...this.deps.localEntities()].map((entity) => ({
      gid: entity.gid,
      name: entity.record.name,
      kind: entity.record.kind,
      groups: entity.record.groups,
      status: entity.state,
    }));
  }

  /**
   * Announces the change soon, once for a burst: registering many entities one after another
   * sends one snapshot, not one per entity (each snapshot lists them all).
   */
  private announceSoon(): void {
    if (this.announceTimer) return;
    this.announceTimer = setTimeout(() => {
      this.announceTimer = undefined;
      void this.announce();
    }, announceCoalesceMs);
    this.announceTimer.unref();
  }

  /** Sends this gateway's PRESENCE snapshot now (also every heartbeat). */
  async announce(): Promise<void> {
    if (!this.broker.connected) return;
    const { config } = this.deps;
    const presence = {
      v: schemaVersionString,
      kind: 'PRESENCE' as const,
      host: config.hostId,
      hlc: this.deps.hlc.tick(),
      ttlMs: config.broker.heartbeatMs * config.broker.presenceTtlBeats,
      entities: this.presenceEntries(),
    };
    const content = encodePresence(presence);
    await this.broker
      .publish({
        exchange: Exchange.roster,
        routingKey: rosterKey(config.hostId),
        content,
        headers: this.deps.signer.headersFor(content),
        messageId: `presence/${config.hostId}/${presence.hlc}`,
        mandatory: false,
        persistent: false,
        expirationMs: presence.ttlMs,
      })
      .catch(() => {});
  }

  /**
   * DeadLetterSink: a cross-host message that failed here goes to the DLQ with its reason. Its
   * broker copy was acked when it was stored, so while the broker is away it waits in memory
   * for the next connect (the event log and the kept body have it besides).
   */
  deadLetter(envelope: Envelope, reason: DeadLetterReason, detail: string | null): void {
    const content = encodeEnvelope(envelope);
    // A message from this host is signed as it would have been published, so a requeue of it
    // verifies; one from another host no longer has its original bytes to verify.
    const signedBy = envelope.from.host === this.hostId ? this.deps.signer.headersFor(content) : undefined;
    const send = async (): Promise<boolean> => {
      if (!this.broker.connected) return false;
      const outcome = await this.publishDeadLetter(content, {
        reason,
        detail: detail ?? '',
        queue: inboxName(envelope.to),
        routingKey: envelope.to,
        messageId: envelope.msgId,
        signedBy,
      });
      return outcome.ok;
    };
    void send().then((sent) => {
      if (!sent) this.unsentDeadLetters.push(send);
    });
  }

  private async sendDeadLettersKept(): Promise<void> {
    for (const send of this.unsentDeadLetters.splice(0)) {
      if (!(await send())) this.unsentDeadLetters.push(send);
    }
  }

  /** Lists the DLQ without consuming it (the channel closes and the broker requeues them). */
  async listDeadLetters(max: number): Promise<DeadLetterView[]> {
    return this.withDeadLetters(async (channel) => {
      const out: DeadLetterView[] = [];
      while (out.length < max) {
        const message = await channel.get(dlqName, { noAck: false });
        if (message === false) break;
        out.push(
          viewOf(
            message.content,
            message.properties.messageId as string | undefined,
            message.properties.headers ?? {},
          ),
        );
      }
      return out;
    });
  }

  /**
   * Moves dead letters back to their recipients' inboxes (all, or those with this msgId), in
   * one pass over what the DLQ held when it started: a letter refused again on arrival comes
   * back to the DLQ's tail, and taking it again would go round for ever. Letters refused for
   * what they are (`refusedOnArrival`) are left in the DLQ unless `force`d, and counted.
   */
  async requeueDeadLetters(msgId: string | undefined, force: boolean): Promise<RequeueResult> {
    return this.withDeadLetters(async (channel) => {
      const result: RequeueResult = { requeued: 0, skipped: {} };
      const { messageCount } = await channel.checkQueue(dlqName);
      // Each letter requeued in this pass, in case one comes back within the count anyway.
      const requeued = new Set<string>();
      for (let taken = 0; taken < messageCount; taken++) {
        const message = await channel.get(dlqName, { noAck: false });
        if (message === false) break;
        const headers = message.properties.headers ?? {};
        const id = message.properties.messageId as string | undefined;
        const routingKey = routingKeyOf(headers);
        // Not acked, so the channel's close puts it back where it was.
        if ((msgId !== undefined && id !== msgId) || routingKey === '') continue;
        const letter = `${id ?? ''}\n${routingKey}`;
        if (id !== undefined && requeued.has(letter)) continue;
        const reason = reasonOf(headers);
        if (!mayRequeue(reason, force)) {
          result.skipped[reason] = (result.skipped[reason] ?? 0) + 1;
          continue;
        }
        const outcome = await this.broker.publish({
          exchange: Exchange.msg,
          routingKey,
          content: message.content,
          messageId: id ?? `requeued/${message.fields.deliveryTag}`,
          mandatory: true,
          persistent: true,
          headers: signatureHeadersOf(headers),
        });
        if (outcome.ok) {
          channel.ack(message);
          requeued.add(letter);
          result.requeued++;
        }
      }
      return result;
    });
  }

  /**
   * The inbox consumer's entry point: every message the broker hands us for `entity` ends here
   * and ends acked (delivered, or dead-lettered with its reason) or left to the broker to
   * redeliver; nothing in it throws. Arrivals from one sender wait in line behind one whose
   * sender the roster does not know yet, so the grace never reorders a sender's messages
   * (R-DL4) and a stranger cannot hold up anyone else's.
   */
  receiveInbound(entity: EntityActor, message: InboundMessage): void {
    this.receive(this.inboxOf(entity), message);
  }

  private receive(destination: Destination, message: InboundMessage): void {
    const admitted = this.admit(destination, message);
    if (!admitted) return;
    const key = `${destination.id}/${admitted.envelope.from.gid}`;
    const line = this.waiting.get(key);
    if (line) {
      line.arrivals.push({ message, admitted, graceUntil: undefined });
      return;
    }
    const deadline = this.deliver(destination, message, admitted, undefined);
    if (deadline === undefined) return;
    this.waiting.set(key, { destination, arrivals: [{ message, admitted, graceUntil: deadline }] });
    this.scheduleWaiting(key);
  }

  private inboxOf(entity: EntityActor): Destination {
    return {
      queue: inboxName(entity.gid),
      id: entity.gid,
      // The sender does not get a copy of its own broadcast.
      ownCopy: (envelope) => envelope.kind === 'BROADCAST' && envelope.from.gid === entity.gid,
      misdirected: (envelope) => this.misdirected(entity, envelope),
      accept: (envelope, message) =>
        entity.accept(envelope.kind === 'BROADCAST' ? envelope : { ...envelope, to: entity.gid }, message),
    };
  }

  private controlDestination(): Destination {
    const host = this.hostId;
    return {
      queue: controlSpec(host).name,
      id: `control.${host}`,
      ownCopy: () => false,
      misdirected: (envelope) => {
        if (!controlKinds.has(envelope.kind)) return `a ${envelope.kind} does not belong in a control queue`;
        if (envelope.to !== host) return `addressed to host ${envelope.to}, not to ${host}`;
        return this.tooLarge(envelope);
      },
      accept: (envelope, message) => this.deps.onControl(envelope, message),
      refusedSpawn: (request, why) => {
        if (request.to === host) this.deps.onRefusedSpawn(request, why);
      },
    };
  }

  private scheduleWaiting(key: string): void {
    setTimeout(() => this.retryWaiting(key), unknownSenderRecheckMs).unref();
  }

  /** Takes one sender's line forward as far as the roster now allows. */
  private retryWaiting(key: string): void {
    const line = this.waiting.get(key);
    if (!line) return;
    const { destination, arrivals } = line;
    while (arrivals.length > 0) {
      const head = arrivals[0] as Arrival;
      const deadline = this.deliver(destination, head.message, head.admitted, head.graceUntil);
      if (deadline !== undefined) {
        head.graceUntil = deadline;
        this.scheduleWaiting(key);
        return;
      }
      arrivals.shift();
    }
    this.waiting.delete(key);
  }

  /**
   * The checks that need no roster: signature, schema, sender on the signing host, clock
   * stamp, expiry. Dead-letters (or, for its own broadcast, acks) and returns undefined when
   * the message goes no further.
   */
  private admit(destination: Destination, message: InboundMessage): Admitted | undefined {
    const { clock, config, signer } = this.deps;
    const queue = destination.queue;
    const signature = signer.verify(message.content, message.headers);
    if (!signature.ok) {
      this.rejectInbound(message, queue, 'bad-signature', signature.detail);
      return undefined;
    }
    const decoded = decodeEnvelope(message.content, this.maxWireBytes);
    if (!decoded.ok) {
      const reason = decoded.reason === 'newer-major' ? 'newer-major' : 'rejected';
      this.rejectInbound(message, queue, reason, `${decoded.reason}: ${decoded.detail}`);
      const spawn = decoded.refusedSpawn;
      // Answered only for the host that signed it: nobody can have refusals sent in another's name.
      if (spawn && (!signer.enabled || spawn.from.host === signature.signer)) {
        destination.refusedSpawn?.(spawn, decoded.detail);
      }
      return undefined;
    }
    const envelope = decoded.envelope;
    if (destination.ownCopy(envelope)) {
      message.ack();
      return undefined;
    }
    const misdirected = destination.misdirected(envelope);
    if (misdirected) {
      this.rejectInbound(message, queue, 'rejected', misdirected);
      return undefined;
    }
    if (signer.enabled && envelope.from.host !== signature.signer) {
      const claim = `${envelope.from.name}@${envelope.from.host}`;
      this.rejectInbound(
        message,
        queue,
        'unknown-sender',
        `claims sender ${claim} but was signed by ${signature.signer}`,
      );
      return undefined;
    }
    const now = clock.now();
    const stamped = decodeHlc(envelope.hlc).wall;
    const skew = config.security.maxClockSkewMs;
    if (stamped > now + skew) {
      const ahead = Math.round((stamped - now) / 1000);
      this.rejectInbound(
        message,
        queue,
        'rejected',
        `stamped ${ahead} s in the future: clock skew beyond security.maxClockSkewMs`,
      );
      return undefined;
    }
    if (stamped < now - config.delivery.ttlMs - skew) {
      const when = new Date(stamped).toISOString();
      this.rejectInbound(message, queue, 'expired', `stamped ${when}: older than any live message`);
      return undefined;
    }
    if (envelope.expiresAt !== undefined && envelope.expiresAt <= now) {
      // Per-message TTL only fires at the queue head; check on arrival too (SPEC §12).
      this.rejectInbound(
        message,
        queue,
        'expired',
        `expired at ${new Date(envelope.expiresAt).toISOString()}`,
      );
      return undefined;
    }
    return { envelope, signer: signature.signer };
  }

  /**
   * The roster check (the sender lives on the signing host), then the hand-over to the entity.
   * Returns the end of the grace while the roster does not know the sender yet.
   */
  private deliver(
    destination: Destination,
    message: InboundMessage,
    { envelope, signer }: Admitted,
    graceUntil: number | undefined,
  ): number | undefined {
    const { metrics, logger, clock, config } = this.deps;
    const queue = destination.queue;
    if (this.deps.signer.enabled && !this.livesOn(envelope.from.gid, signer)) {
      // The roster may not have the sender yet (it just registered): a short grace, then refuse.
      const now = clock.now();
      const deadline = graceUntil ?? now + config.security.unknownSenderGraceMs;
      if (now < deadline) return deadline;
      const who = `${envelope.from.name} (${envelope.from.gid})`;
      this.rejectInbound(message, queue, 'unknown-sender', `${who} is not in ${signer}'s roster`);
      return undefined;
    }
    this.deps.hlc.receive(envelope.hlc);
    try {
      destination.accept(envelope, message);
      if (envelope.kind !== 'RECEIPT') metrics.accepted.inc({ route: 'broker' });
    } catch (err) {
      logger.error(
        { err, traceId: envelope.traceId, msgId: envelope.msgId },
        'could not accept a message from the broker',
      );
      this.rejectInbound(message, queue, 'rejected', (err as Error).message);
    }
    return undefined;
  }

  /**
   * Why a message is not for this inbox, or undefined: the kinds an inbox takes, addressed to
   * this entity (a signed message re-published to another inbox is refused, not re-routed),
   * answering only a message its sender got, within this gateway's own size limit.
   */
  private misdirected(entity: EntityActor, envelope: Envelope): string | undefined {
    if (!inboxKinds.has(envelope.kind)) return `a ${envelope.kind} does not belong in an inbox`;
    if (envelope.kind === 'BROADCAST') {
      const group = envelope.to.startsWith('broadcast.') ? envelope.to.slice('broadcast.'.length) : undefined;
      if (group === undefined) return `a broadcast addressed to ${envelope.to}`;
      if (group !== 'all' && !entity.record.groups.includes(group))
        return `a broadcast for group ${group}, which ${entity.record.name} is not in`;
    } else if (envelope.to !== entity.gid) {
      return `addressed to ${envelope.to}, not to ${entity.record.name} (${entity.gid})`;
    }
    return this.deps.refusesReply?.(envelope) ?? this.tooLarge(envelope);
  }

  private tooLarge(envelope: Envelope): string | undefined {
    const size = byteLength(envelope.text);
    const limit = this.deps.config.limits.maxTextBytes;
    if (size > limit)
      return `text is ${size} bytes; this gateway takes at most ${limit} (limits.maxTextBytes)`;
    return undefined;
  }

  /** Whether the roster places entity `gid` on `host` (invariant 6: the sender lives on the signer). */
  private livesOn(gid: string, host: string): boolean {
    // A gateway writes as itself (SPAWN_RESULT, TOO_LATE): only its own key can sign that.
    if (gid === gatewayAddress(host).gid) return true;
    if (host === this.hostId) return this.deps.findLocal(gid) !== undefined;
    return this.roster.find(gid).some((entry) => entry.host === host);
  }

  private rejectInbound(
    message: InboundMessage,
    queue: string,
    reason: DeadLetterReason,
    detail: string,
  ): void {
    this.deps.metrics.deadLetters.inc({ reason });
    this.deps.logger.error(
      { queue, reason, detail, msgId: message.messageId, routingKey: message.routingKey },
      'refused a message from the broker; dead-lettered with its reason',
    );
    void this.publishDeadLetter(message.content, {
      reason,
      detail,
      queue,
      routingKey: message.routingKey,
      messageId: message.messageId,
      signedBy: message.headers,
    }).then((outcome) => {
      if (outcome.ok) message.ack();
    });
  }

  /**
   * Runs operator tooling on bridge.dlq. Every host's dead letters are the operator's: a
   * gateway login reads them only when provisioned with --read-dlq, so a refusal says so.
   */
  private withDeadLetters<T>(fn: (channel: BrokerChannel) => Promise<T>): Promise<T> {
    return this.broker.withChannel(fn).catch((err: unknown) => {
      if ((err as { code?: number }).code !== 403) throw err;
      throw new BridgeError(
        ErrorCode.forbidden,
        `this gateway's broker login may not read ${dlqName} (every host's dead letters are the ` +
          `operator's): run \`bridge dlq\` on the operator's gateway, or grant it to this one with ` +
          `\`bridge broker provision ${this.hostId} --read-dlq --apply\``,
        { cause: err },
      );
    });
  }

  private async publishDeadLetter(
    content: Buffer,
    info: {
      reason: string;
      detail: string;
      queue: string;
      routingKey: string;
      messageId: string | undefined;
      /** Headers of the original, whose signature travels along so a requeue still verifies. */
      signedBy?: Record<string, unknown> | undefined;
    },
  ): Promise<PublishOutcome> {
    const request: PublishRequest = {
      exchange: Exchange.dlx,
      routingKey: info.routingKey,
      content,
      messageId: info.messageId ?? `dead/${this.hostId}/${this.deps.hlc.tick()}`,
      mandatory: false,
      persistent: true,
      headers: {
        [DeadLetterHeader.reason]: info.reason,
        [DeadLetterHeader.detail]: info.detail.slice(0, 1000),
        [DeadLetterHeader.queue]: info.queue,
        [DeadLetterHeader.routingKey]: info.routingKey,
        [DeadLetterHeader.host]: this.hostId,
        [DeadLetterHeader.at]: new Date(this.deps.clock.now()).toISOString(),
        ...signatureHeadersOf(info.signedBy),
      },
    };
    try {
      return await this.broker.publish(request);
    } catch (err) {
      this.deps.logger.warn(
        { err, reason: info.reason },
        'could not dead-letter now; the broker will redeliver it',
      );
      return { ok: false, reason: 'rejected', detail: (err as Error).message };
    }
  }

  private onPresence(message: InboundMessage): void {
    message.ack();
    const decoded = decodePresence(message.content);
    if (!decoded.ok) {
      this.ignorePresence('malformed', decoded.detail, message.routingKey);
      return;
    }
    const presence = decoded.presence;
    if (presence.host === this.hostId) return;
    const signature = this.deps.signer.verify(message.content, message.headers);
    if (!signature.ok) {
      this.ignorePresence('bad-signature', signature.detail, message.routingKey);
      return;
    }
    if (this.deps.signer.enabled && signature.signer !== presence.host) {
      // A host may only announce its own entities (invariant 6).
      this.ignorePresence(
        'wrong-host',
        `announces host ${presence.host} but was signed by ${signature.signer}`,
        message.routingKey,
      );
      return;
    }
    const age = judgePresenceAge(presence, {
      now: this.deps.clock.now(),
      maxSkewMs: this.deps.config.security.maxClockSkewMs,
      lastSeenHlc: this.roster.lastSeenHlc(presence.host),
    });
    if (!age.ok) {
      this.ignorePresence(age.reason, age.detail, message.routingKey);
      return;
    }
    this.deps.hlc.receive(presence.hlc);
    this.roster.apply(presence);
    // Senders this presence announced may be what held lines are waiting for.
    for (const key of [...this.waiting.keys()]) this.retryWaiting(key);
  }

  private ignorePresence(reason: string, detail: string, routingKey: string): void {
    this.deps.metrics.presenceIgnored.inc({ reason });
    this.deps.logger.warn({ reason, detail, routingKey }, 'ignored a PRESENCE announcement');
  }
}

/** What a control queue takes: requests to this host, and receipts for its sends (R-RC1). */
const controlKinds: ReadonlySet<string> = new Set(['SPAWN', 'STOP', 'RECEIPT']);

/** What an inbox takes; control and presence kinds travel on their own exchanges. */
const inboxKinds: ReadonlySet<string> = new Set([
  'SEND',
  'REPLY',
  'BROADCAST',
  'ASK',
  'ANSWER',
  'TOO_LATE',
  'SPAWN_RESULT',
]);

/** A message that passed the checks needing no roster, and the host that signed it. */
interface Admitted {
  envelope: Envelope;
  signer: string;
}

interface Arrival {
  message: InboundMessage;
  admitted: Admitted;
  graceUntil: number | undefined;
}

/** How long a change waits for others before it is announced (U5). */
const announceCoalesceMs = 50;

/** How often a message from a sender not yet in the roster is checked again during its grace. */
const unknownSenderRecheckMs = 200;

function signatureHeadersOf(headers: Record<string, unknown> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of [SignatureHeader.signature, SignatureHeader.signer]) {
    const value = headers?.[key];
    if (typeof value === 'string') out[key] = value;
  }
  return out;
}

function deathKey(headers: Record<string, unknown>): string | undefined {
  const deaths = headers['x-death'];
  if (!Array.isArray(deaths) || deaths.length === 0) return undefined;
  const keys = (deaths[0] as { 'routing-keys'?: unknown })['routing-keys'];
  return Array.isArray(keys) && typeof keys[0] === 'string' ? keys[0] : undefined;
}

/** Why a letter is dead: the gateway's own header, else the broker's (x-death). */
function reasonOf(headers: Record<string, unknown>): string {
  const deaths = headers['x-death'];
  const death = Array.isArray(deaths) ? (deaths[0] as Record<string, unknown>) : undefined;
  return String(headers[DeadLetterHeader.reason] ?? death?.reason ?? 'unknown');
}

/** Whom a letter was for: its inbox's routing key, the recipient's gid ('' if unknown). */
function routingKeyOf(headers: Record<string, unknown>): string {
  return String(headers[DeadLetterHeader.routingKey] ?? deathKey(headers) ?? '');
}

/** What `bridge dlq requeue` did: how many went back, and how many it left, by reason. */
export interface RequeueResult {
  requeued: number;
  skipped: Record<string, number>;
}

/**
 * Reasons a letter was refused on arrival for what it is (its signature, its content or its
 * address), not for the moment it came: sent back unchanged, it is refused and dead-lettered
 * again. Others (maxlen, expired, recipient-gone, …) may well get through on a second try.
 */
export const refusedOnArrival: ReadonlySet<string> = new Set(['bad-signature', 'rejected']);

/** Whether a requeue sends back a letter dead for `reason` (`force` sends back any). */
export function mayRequeue(reason: string, force: boolean): boolean {
  return force || !refusedOnArrival.has(reason);
}

function viewOf(
  content: Buffer,
  msgId: string | undefined,
  headers: Record<string, unknown>,
): DeadLetterView {
  const deaths = headers['x-death'];
  const death = Array.isArray(deaths) ? (deaths[0] as Record<string, unknown>) : undefined;
  return {
    msgId,
    reason: reasonOf(headers),
    detail: String(headers[DeadLetterHeader.detail] ?? ''),
    queue: String(headers[DeadLetterHeader.queue] ?? death?.queue ?? ''),
    routingKey: routingKeyOf(headers),
    host: String(headers[DeadLetterHeader.host] ?? ''),
    at: String(headers[DeadLetterHeader.at] ?? ''),
    body: content.toString('utf8').slice(0, 4096),
  };
}
