import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { formatInjection, injectionMarker } from '../inject/formatInjection.js';
import {
  isReadyStatus,
  type PaneInjector,
  type PaneStatus,
  type PaneTarget,
} from '../inject/paneInjector.js';
import {
  type DeadLetterReason,
  type DeliveryContext,
  type DeliveryEvent,
  DeliveryMode,
  deliveryMachine,
} from '../machines/deliveryMachine.js';
import { type EntityEvent, type EntityInput, entityMachine } from '../machines/entityMachine.js';
import type { ActorKind } from '../machines/index.js';
import type { Metrics } from '../metrics/metrics.js';
import { ActorCell, type RuntimeDeps, type Transition } from '../runtime/actorCell.js';
import { readActorHead } from '../store/actorHeads.js';
import type { EntityRecord } from '../store/entities.js';
import { deleteEntity } from '../store/entities.js';
import { purgeMessage, putMessage, readMessage } from '../store/messageBodies.js';
import { readActorEvents } from '../store/readEvents.js';
import { byteLength, digestText } from '../wire/digest.js';
import type { Envelope } from '../wire/envelope.js';

/** A received broker message, as far as a delivery needs it: settled once the entity has it. */
export interface InboundHandle {
  ack(): void;
}

/** Where dead letters of broker-delivered messages go (the broker's DLQ, with their reason). */
export interface DeadLetterSink {
  deadLetter(
    envelope: Envelope,
    reason: DeadLetterReason,
    detail: string | null,
    inbound: InboundHandle,
  ): void;
}

export interface EntityActorDeps extends RuntimeDeps {
  config: Config;
  metrics: Metrics;
  createInjector: (pane: PaneTarget) => PaneInjector;
  deadLetters?: DeadLetterSink | undefined;
}

type DeliveryCell = ActorCell<DeliveryContext, DeliveryEvent>;

interface LiveDelivery {
  readonly cell: DeliveryCell;
  /** Loaded lazily after a restart; the store has it until the delivery finishes. */
  envelope: Envelope | undefined;
  /** The broker message it came in, acked only once the delivery is finished and on disk. */
  inbound: InboundHandle | undefined;
}

interface ReplyWaiter {
  readonly peer: string;
  msgId: string | undefined;
  readonly resolve: (handover: Handover | null) => void;
}

/**
 * Messages on their way to a main in a tool result. `confirm` once the response is out (they
 * are acked then: broker ack, body purged); `giveBack` if it never got there, and they are
 * held again for the next drain. Until either, they are neither lost nor offered twice; a
 * restart offers them again.
 */
export interface Handover {
  readonly envelopes: Envelope[];
  confirm(): void;
  giveBack(): void;
}

/** The result of offering a message to an entity. */
export type AcceptOutcome = 'accepted' | 'duplicate';

export const deliveryKind: ActorKind = 'delivery';
export const entityKind: ActorKind = 'entity';

export function deliveryActorId(msgId: string, recipient: string): string {
  return `${msgId}/${recipient}`;
}

/**
 * One local entity and everything addressed to it: its entity machine, one delivery actor per
 * undelivered message in arrival order (per-recipient FIFO, R-DL4), and the way messages reach
 * it: typed into its pane one at a time when the pane can take them (R-DL2), or held for an
 * open send or a drain (R-DL3).
 */
export class EntityActor {
  private readonly deliveries = new Map<string, LiveDelivery>();
  private readonly waiters: ReplyWaiter[] = [];
  private readonly deliveryMachine;
  private injector: PaneInjector | undefined;
  private stopWatching: (() => void) | undefined;
  private paneStatus: PaneStatus = 'unknown';
  private pumpScheduled = false;

  private constructor(
    readonly record: EntityRecord,
    private readonly cell: ActorCell<EntityInput, EntityEvent>,
    private readonly deps: EntityActorDeps,
  ) {
    const { clock } = deps;
    this.deliveryMachine = deliveryMachine.provide({
      actions: {
        typeIntoPane: ({ context }) => this.typeIntoPane(context.msgId),
        verifyInjection: ({ context }) => this.verifyInjection(context.msgId),
        deadLetter: ({ context }) => this.reportDeadLetter(context),
      },
      delays: {
        untilDeadline: ({ context }) => Math.max(0, context.deadline - clock.now()),
      },
    });
  }

  /** A newly registered entity. */
  static create(record: EntityRecord, host: string, deps: EntityActorDeps): EntityActor {
    const cell = ActorCell.create<EntityInput, EntityEvent>(
      entityMachine,
      inputOf(record, host),
      { kind: entityKind, id: record.gid, traceId: record.gid, msgId: null },
      deps,
    );
    return new EntityActor(record, cell, deps);
  }

  /** An entity rebuilt from its log after a restart. */
  static rehydrate(record: EntityRecord, deps: EntityActorDeps): EntityActor {
    const rows = readActorEvents(deps.store, entityKind, record.gid);
    const cell = ActorCell.rehydrate<EntityInput, EntityEvent>(
      entityMachine,
      rows,
      { kind: entityKind, id: record.gid, traceId: record.gid, msgId: null },
      deps,
    );
    cell.send({ type: 'actor.rehydrated' });
    return new EntityActor(record, cell, deps);
  }

  get gid(): string {
    return this.record.gid;
  }

  get mode(): DeliveryMode {
    return this.record.pane === null ? DeliveryMode.hold : DeliveryMode.inject;
  }

  /** registered, active.idle, active.busy or gone. */
  get state(): string {
    return this.cell.state;
  }

  /** Messages accepted for this entity and not yet delivered. */
  get depth(): number {
    return this.deliveries.size;
  }

  /** Connects the pane (if any) and starts delivering. */
  start(): void {
    if (this.record.pane === null) {
      this.cell.send({ type: 'entity.activated' });
      return;
    }
    this.injector = this.deps.createInjector(this.record.pane);
    this.stopWatching = this.injector.watchStatus((status) => this.onPaneStatus(status));
  }

  /**
   * Accepts a message for this entity, durably once the current batch commits. A msgId this
   * entity already has (live or finished) is a duplicate and changes nothing (invariant 5).
   */
  accept(envelope: Envelope, inbound?: InboundHandle): AcceptOutcome {
    const id = deliveryActorId(envelope.msgId, this.gid);
    const live = this.deliveries.get(envelope.msgId);
    if (live) {
      // A redelivery (reconnect, consumer timeout) or a replay: keep the newest handle, the one
      // that can still ack, and settle the one it replaces so it does not hold a prefetch slot.
      if (inbound) {
        const superseded = live.inbound;
        live.inbound = inbound;
        superseded?.ack();
      }
      return 'duplicate';
    }
    const head = readActorHead(this.deps.store, deliveryKind, id);
    if (head) {
      if (inbound) this.settleFinished(envelope, head.state, inbound);
      return 'duplicate';
    }
    if (this.cell.done) {
      throw new BridgeError(
        ErrorCode.unknownRecipient,
        `${this.record.name} was deregistered; it takes no messages`,
      );
    }
    const { config, clock } = this.deps;
    putMessage(this.deps.store, this.gid, envelope);
    const acceptedAt = clock.now();
    const cell = ActorCell.create<DeliveryContext, DeliveryEvent>(
      this.deliveryMachine,
      {
        msgId: envelope.msgId,
        traceId: envelope.traceId,
        recipient: this.gid,
        sender: envelope.from.gid,
        mode: this.mode,
        acceptedAt,
        deadline: envelope.expiresAt ?? acceptedAt + config.delivery.ttlMs,
        maxAttempts: config.delivery.maxAttempts,
        retryBaseMs: config.delivery.retryBaseMs,
        digest: digestText(envelope.text),
        size: byteLength(envelope.text),
      },
      { kind: deliveryKind, id, traceId: envelope.traceId, msgId: envelope.msgId, owner: this.gid },
      this.deps,
    );
    this.track(cell, envelope, inbound);
    if (this.mode === DeliveryMode.hold) this.hold(envelope.msgId);
    else this.schedulePump();
    return 'accepted';
  }

  /** A message this entity already finished came again: ack it, or dead-letter it again. */
  private settleFinished(envelope: Envelope, state: string, inbound: InboundHandle): void {
    if (state === 'dead-lettered' && this.deps.deadLetters) {
      this.deps.deadLetters.deadLetter(
        envelope,
        'rejected',
        'redelivered after it was dead-lettered',
        inbound,
      );
    } else inbound.ack();
  }

  /** Rebuilds one of this entity's deliveries from the log and resumes it. */
  rehydrateDelivery(msgId: string, traceId: string): void {
    const id = deliveryActorId(msgId, this.gid);
    const rows = readActorEvents(this.deps.store, deliveryKind, id);
    const cell = ActorCell.rehydrate<DeliveryContext, DeliveryEvent>(
      this.deliveryMachine,
      rows,
      { kind: deliveryKind, id, traceId, msgId, owner: this.gid },
      this.deps,
    );
    this.track(cell, undefined, undefined);
    cell.send({ type: 'actor.rehydrated' });
    // A message typed before the crash but not yet acked: ack it now.
    if (cell.state === 'injected') this.ackInjected(cell);
    if (this.mode === DeliveryMode.hold && cell.state === 'pending') this.hold(msgId);
    this.schedulePump();
  }

  /**
   * Hands over up to `max` held messages, oldest first. They are marked handed over, and acked
   * only when the caller confirms that the answer went out (invariant 5): a drain whose answer
   * is lost loses nothing.
   */
  async drain(max: number): Promise<Handover> {
    const taken: LiveDelivery[] = [];
    const envelopes: Envelope[] = [];
    for (const [msgId, live] of this.deliveries) {
      if (taken.length >= max) break;
      if (live.cell.state !== 'held') continue;
      const envelope = this.envelopeOf(msgId, live);
      if (!envelope) continue;
      live.cell.send({ type: 'delivery.handedOver', via: 'drain' });
      taken.push(live);
      envelopes.push(envelope);
    }
    // Commit `handed-over` before answering. Besides the log, the wait lets the event loop see a
    // connection the main has already dropped, so the answer is known undelivered and the
    // messages are held again rather than acked.
    await this.deps.store.batch.flush();
    return this.handover(taken, envelopes, 'drain');
  }

  private handover(taken: LiveDelivery[], envelopes: Envelope[], via: 'drain' | 'open-send'): Handover {
    let settled = false;
    const settle = (event: DeliveryEvent) => {
      if (settled) return;
      settled = true;
      for (const live of taken) if (live.cell.state === 'handed-over') live.cell.send(event);
      if (event.type === 'delivery.returned') this.schedulePump();
    };
    return {
      envelopes,
      confirm: () => settle({ type: 'delivery.acked', via }),
      giveBack: () => settle({ type: 'delivery.returned' }),
    };
  }

  /**
   * Parks until a message from `peer` (or one answering `msgId`) arrives for this entity, or
   * `ms` passes (R-DL3). Register before sending, so a fast reply cannot slip past.
   */
  waitForReply(
    peer: string,
    ms: number,
  ): { promise: Promise<Handover | null>; cancel: () => void; answering: (msgId: string) => void } {
    let waiter!: ReplyWaiter;
    const promise = new Promise<Handover | null>((resolve) => {
      waiter = { peer, msgId: undefined, resolve };
    });
    this.waiters.push(waiter);
    const cancel = (): void => {
      const index = this.waiters.indexOf(waiter);
      if (index >= 0) this.waiters.splice(index, 1);
      this.deps.clock.clearTimeout(timer);
      waiter.resolve(null);
    };
    const timer = this.deps.clock.setTimeout(cancel, ms);
    const answering = (msgId: string): void => {
      waiter.msgId = msgId;
    };
    return { promise, cancel, answering };
  }

  /** Ends this entity: undelivered messages are dead-lettered (never dropped) and it is forgotten. */
  deregister(): void {
    for (const live of [...this.deliveries.values()]) {
      live.cell.send({ type: 'delivery.deadLettered', reason: 'recipient-gone' });
    }
    this.cell.send({ type: 'entity.deregistered' });
    deleteEntity(this.deps.store, this.gid);
    void this.stop();
  }

  /** Stops timers and the pane connection; the log keeps everything for the next start. */
  async stop(): Promise<void> {
    this.stopWatching?.();
    for (const waiter of this.waiters.splice(0)) waiter.resolve(null);
    for (const live of this.deliveries.values()) live.cell.stop();
    this.cell.stop();
    await this.injector?.close();
  }

  private track(
    cell: DeliveryCell,
    envelope: Envelope | undefined,
    inbound: InboundHandle | undefined,
  ): void {
    const msgId = cell.context.msgId;
    const live: LiveDelivery = { cell, envelope, inbound };
    this.deliveries.set(msgId, live);
    cell.onTransition = (transition) => this.onDeliveryTransition(msgId, live, transition);
  }

  private hold(msgId: string): void {
    const live = this.deliveries.get(msgId);
    if (!live) return;
    live.cell.send({ type: 'delivery.hold' });
    const envelope = this.envelopeOf(msgId, live);
    if (!envelope) return;
    const index = this.waiters.findIndex(
      (w) => w.peer === envelope.from.gid || (w.msgId !== undefined && w.msgId === envelope.inReplyTo),
    );
    if (index < 0) return;
    const [waiter] = this.waiters.splice(index, 1);
    live.cell.send({ type: 'delivery.handedOver', via: 'open-send' });
    const handover = this.handover([live], [envelope], 'open-send');
    queueMicrotask(() => waiter?.resolve(handover));
  }

  private onPaneStatus(status: PaneStatus): void {
    this.paneStatus = status;
    if (this.cell.state === 'registered') this.cell.send({ type: 'entity.activated' });
    if (isReadyStatus(status)) this.cell.send({ type: 'entity.idle' });
    else this.cell.send({ type: 'entity.busy', status });
    this.schedulePump();
  }

  private onDeliveryTransition(msgId: string, live: LiveDelivery, transition: Transition): void {
    const { cell } = live;
    // Typed, or found typed by crash recovery: the entity has it (invariant 5).
    if (transition.to === 'injected' && transition.from !== 'injected') {
      queueMicrotask(() => this.ackInjected(cell));
    }
    if (transition.done) {
      this.deliveries.delete(msgId);
      const { metrics, clock } = this.deps;
      metrics.deliveries.inc({ outcome: transition.to });
      if (transition.to === 'acked') {
        purgeMessage(this.deps.store, msgId, this.gid);
        metrics.deliveryLatency.observe({ mode: this.mode }, (clock.now() - cell.context.acceptedAt) / 1000);
      }
      if (live.inbound) this.settleInbound(live, transition.to);
    }
    this.schedulePump();
  }

  /** Acks the broker only once the finished delivery is on disk (invariant 5). */
  private settleInbound(live: LiveDelivery, state: string): void {
    this.deps.store.batch.afterCommit(() => {
      const inbound = live.inbound;
      if (!inbound) return;
      const envelope = live.envelope ?? readMessage(this.deps.store, live.cell.context.msgId, this.gid);
      if (state === 'dead-lettered' && this.deps.deadLetters && envelope) {
        this.deps.deadLetters.deadLetter(
          envelope,
          live.cell.context.reason ?? 'rejected',
          live.cell.context.lastError,
          inbound,
        );
      } else inbound.ack();
    });
  }

  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    queueMicrotask(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Types the oldest pending message when the pane can take it; one at a time, in order. */
  private pump(): void {
    if (this.mode !== DeliveryMode.inject || !this.injector || !isReadyStatus(this.paneStatus)) return;
    for (const live of this.deliveries.values()) {
      const state = live.cell.state;
      if (state === 'injected') continue; // typed, waiting for its ack: not in the way
      if (state === 'pending') live.cell.send({ type: 'delivery.inject' });
      return; // the head is being typed, verified or retried: the rest wait (FIFO)
    }
  }

  private typeIntoPane(msgId: string): void {
    const live = this.deliveries.get(msgId);
    const injector = this.injector;
    if (!live || !injector) return;
    const envelope = this.envelopeOf(msgId, live);
    if (!envelope) return;
    injector.inject(formatInjection(envelope)).then(
      () => live.cell.send({ type: 'delivery.injected' }),
      (err: unknown) => this.injectFailed(live.cell, err),
    );
  }

  private verifyInjection(msgId: string): void {
    const live = this.deliveries.get(msgId);
    const injector = this.injector;
    if (!live || !injector) return;
    injector.contains(injectionMarker(msgId), this.deps.config.delivery.captureLines).then(
      (found) => live.cell.send({ type: found ? 'delivery.found' : 'delivery.absent' }),
      (err: unknown) => this.injectFailed(live.cell, err),
    );
  }

  private injectFailed(cell: DeliveryCell, err: unknown): void {
    const error = err instanceof Error ? err.message : String(err);
    this.deps.logger.warn(
      { err, traceId: cell.context.traceId, msgId: cell.context.msgId, entity: this.record.name },
      'injection failed; will retry',
    );
    cell.send({ type: 'delivery.injectFailed', error });
  }

  /** Local deliveries are acked as soon as `injected` is recorded: there is no broker to tell. */
  private ackInjected(cell: DeliveryCell): void {
    cell.send({ type: 'delivery.acked', via: 'pane' });
  }

  private reportDeadLetter(context: DeliveryContext): void {
    const reason: DeadLetterReason = context.reason ?? 'rejected';
    this.deps.metrics.deadLetters.inc({ reason });
    this.deps.logger.error(
      {
        traceId: context.traceId,
        msgId: context.msgId,
        recipient: this.record.name,
        reason,
        attempts: context.attempts,
        lastError: context.lastError,
      },
      'message dead-lettered; its body is kept for the operator',
    );
  }

  /** The message's envelope, from memory or the store; a missing body dead-letters it loudly. */
  private envelopeOf(msgId: string, live: LiveDelivery): Envelope | undefined {
    if (live.envelope) return live.envelope;
    const envelope = readMessage(this.deps.store, msgId, this.gid);
    if (!envelope) {
      live.cell.send({
        type: 'delivery.deadLettered',
        reason: 'rejected',
        detail: 'message body missing from the store',
      });
      return undefined;
    }
    live.envelope = envelope;
    return envelope;
  }
}

function inputOf(record: EntityRecord, host: string): EntityInput {
  return {
    gid: record.gid,
    name: record.name,
    kind: record.kind,
    host,
    groups: record.groups,
    mode: record.pane === null ? DeliveryMode.hold : DeliveryMode.inject,
  };
}
