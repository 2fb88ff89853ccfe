import type { Config } from '../config/schema.js';
import { ActorCell, type ActorEffects, type RuntimeDeps, type Transition } from '../kernel/ActorCell.js';
import type { Clock } from '../kernel/clock.js';
import {
  type DeliveryContext,
  type DeliveryEvent,
  type DeliveryMode,
  deliveryMachine,
} from '../machines/deliveryMachine.js';
import type { ActorKind } from '../machines/index.js';
import type { Metrics } from '../metrics/metrics.js';
import { formatInjection, injectionMarker } from '../panes/formatInjection.js';
import { DeferReason, type PaneInjector, type PaneMessage } from '../panes/paneInjector.js';
import { deliveryActorId } from '../store/actorIds.js';
import { type OutboxDeadLetter, putOutboxDeadLetter } from '../store/deadLetterOutbox.js';
import { purgeMessage, putMessage, readMessage, storedEnvelope } from '../store/messageBodies.js';
import type { Store } from '../store/openStore.js';
import { readActorEvents } from '../store/readEvents.js';
import { DeadLetterReason } from '../wire/deadLetterReason.js';
import { signatureHeadersOf } from '../wire/deadLetterView.js';
import { byteLength, digestText } from '../wire/digest.js';
import type { Envelope } from '../wire/envelope.js';
import type { ReceiptSink } from '../wire/receipt.js';
import { reportDeadLetter } from './deadLetterReport.js';
import type { Handover, InboundHandle } from './handover.js';
import { receiptForTransition } from './receiptForTransition.js';

export const deliveryKind: ActorKind = 'delivery';

/**
 * Where dead letters of cross-host messages go (the broker's DLQ, with their reason): a
 * delivery keeps its letter in the store's outbox in the batch of its transition, and the sink
 * publishes what the outbox holds, with the bytes the message came in.
 */
export interface DeadLetterSink {
  forwardKept(): void;
}

/** What a delivery needs from the gateway. */
export interface DeliveryDeps extends RuntimeDeps {
  config: Pick<Config, 'delivery'>;
  metrics: Metrics;
  deadLetters?: DeadLetterSink | undefined;
  /** An answer came too late for its turn: tell its sender (TOO_LATE). */
  onTooLate?: ((answer: Envelope, why: string) => void) | undefined;
  /** Where the stages of deliveries go back to their senders (R-RC1). */
  receipts?: ReceiptSink | undefined;
  /** The gateway's one delivery machine for all its deliveries. */
  machines: { readonly delivery: typeof deliveryMachine };
}

/** What a delivery needs from the entity it is for. */
export interface DeliveryOwner {
  readonly gid: string;
  readonly name: string;
  /** The entity's host: a message dead-lettered here that came from elsewhere goes to the DLQ. */
  readonly host: string;
  readonly mode: DeliveryMode;
  /** The pane's injector, while the pane is connected. */
  injector(): PaneInjector | undefined;
  /** Called after each of the delivery's transitions, in the same tick. */
  moved(delivery: Delivery, transition: Transition): void;
}

/** How messages were handed over: to a drain, an open send or an asking turn. */
export type HandoverVia = Extract<DeliveryEvent, { type: 'delivery.handedOver' }>['via'];

type DeliveryCell = ActorCell<typeof deliveryMachine>;

/** What a pane step types (or an agent host is handed) for `envelope`. */
function messageOf(envelope: Envelope): PaneMessage {
  return { text: formatInjection(envelope), marker: injectionMarker(envelope.msgId), busy: envelope.busy };
}

/**
 * The delivery machine with one gateway's clock, made once per gateway and shared by all its
 * deliveries (a machine per entity cost ~30 KB each: 10,000 entities held 3,000 machine
 * definitions). Its effects are each delivery's own methods, given to its actor when it is
 * created or rebuilt.
 */
export function createDeliveryMachine(clock: Clock): typeof deliveryMachine {
  return deliveryMachine.provide({
    delays: {
      untilDeadline: ({ context }) => Math.max(0, context.deadline - clock.now()),
    },
  });
}

/**
 * One message on its way to one local entity, from its acceptance to its end: typed into the
 * pane and verified (R-DL2, R-DL5, R-DL6), held for and handed over to a drain, an open send
 * or an asking turn (R-DL3, U2), or dead-lettered with its reason. Its body is in the store
 * until it is delivered; the log has only its digest (R-H2).
 */
export class Delivery {
  private readonly cell: DeliveryCell;

  /** `open` creates or rebuilds its actor, given the delivery's effects as its port. */
  private constructor(
    open: (effects: ActorEffects) => DeliveryCell,
    /** Loaded lazily after a restart; the store has it until the delivery finishes. */
    private envelope: Envelope | undefined,
    private readonly owner: DeliveryOwner,
    private readonly deps: DeliveryDeps,
  ) {
    // Each effect runs after its transition is on disk, by when this delivery is built; one of
    // a final state (dead letter, too late) also after the delivery has left its entity's inbox.
    this.cell = open({
      typeIntoPane: () => this.typeIntoPane(),
      submitTyped: () => this.submitTyped(),
      watchPane: () => this.watchPane(),
      verifyInjection: () => this.verifyInjection(),
      deadLetter: () => this.reportDeadLetter(),
      noticeTooLate: () => this.noticeTooLate(),
    });
    this.cell.onTransition = (transition) => this.onTransition(transition);
  }

  /**
   * A message just accepted for `owner`: its body stored (with the bytes it came in, from the
   * broker: `inbound`), its actor created.
   */
  static create(
    envelope: Envelope,
    owner: DeliveryOwner,
    deps: DeliveryDeps,
    inbound?: InboundHandle,
  ): Delivery {
    const { config, clock } = deps;
    const { msgId, traceId } = envelope;
    const wire = inbound && { content: inbound.content, headers: signatureHeadersOf(inbound.headers) };
    putMessage(deps.store, owner.gid, envelope, wire);
    const acceptedAt = clock.now();
    const open = (effects: ActorEffects) =>
      ActorCell.create(
        deps.machines.delivery,
        {
          msgId,
          traceId,
          recipient: owner.gid,
          sender: envelope.from.gid,
          senderHost: envelope.from.host,
          mode: owner.mode,
          acceptedAt,
          deadline: envelope.expiresAt ?? acceptedAt + config.delivery.ttlMs,
          recheckMs: config.delivery.paneRecheckMs,
          maxAttempts: config.delivery.maxAttempts,
          retryBaseMs: config.delivery.retryBaseMs,
          digest: digestText(envelope.text),
          size: byteLength(envelope.text),
          kind: envelope.kind,
          ...(envelope.turnId === undefined ? {} : { turnId: envelope.turnId }),
        },
        { kind: deliveryKind, id: deliveryActorId(msgId, owner.gid), traceId, msgId, owner: owner.gid },
        deps,
        effects,
      );
    return new Delivery(open, envelope, owner, deps);
  }

  /** One of `owner`'s deliveries rebuilt from the log; `resume` it once its entity tracks it. */
  static rehydrate(msgId: string, traceId: string, owner: DeliveryOwner, deps: DeliveryDeps): Delivery {
    const id = deliveryActorId(msgId, owner.gid);
    const open = (effects: ActorEffects) =>
      ActorCell.rehydrate(
        deps.machines.delivery,
        readActorEvents(deps.store, deliveryKind, id),
        { kind: deliveryKind, id, traceId, msgId, owner: owner.gid },
        deps,
        effects,
      );
    return new Delivery(open, undefined, owner, deps);
  }

  get msgId(): string {
    return this.cell.context.msgId;
  }

  get state(): string {
    return this.cell.state;
  }

  get context(): DeliveryContext {
    return this.cell.context;
  }

  /** Tells the sender the message is here: the receipt of the delivery's first state. */
  reportAccepted(): void {
    this.reportReceipt({ event: 'xstate.init', from: null, to: this.cell.state, done: false, data: null });
  }

  /** Re-arms a rebuilt delivery's timers and effects; one submitted before a crash is acked now. */
  resume(): void {
    this.cell.send({ type: 'actor.rehydrated' });
    if (this.cell.state === 'submitted') this.ackInjected();
  }

  /** Types it into the pane (the pane can take it, and it is first in line). */
  inject(): void {
    this.cell.send({ type: 'delivery.inject' });
  }

  /** Holds it for a drain, an open send or an asking turn. */
  hold(): void {
    this.cell.send({ type: 'delivery.hold' });
  }

  /** Hands it over; `by` names the operator who took it at the console (`via: 'console'`). */
  handOver(via: HandoverVia, by?: string): void {
    this.cell.send({ type: 'delivery.handedOver', via, ...(by === undefined ? {} : { by }) });
  }

  /** An answer no turn takes any more: injected nowhere, its sender told (U2). */
  tooLate(why: string): void {
    this.cell.send({ type: 'delivery.tooLate', turnId: this.cell.context.turnId ?? '', why });
  }

  deadLetter(reason: DeadLetterReason, detail?: string): void {
    this.cell.send({ type: 'delivery.deadLettered', reason, ...(detail === undefined ? {} : { detail }) });
  }

  /**
   * Ends a handover: acked if the caller got it (`delivered`), held again if not; an answer
   * that never reached its caller is not offered to anyone else.
   */
  settleHandover(via: HandoverVia, delivered: boolean): void {
    if (this.cell.state !== 'handed-over') return;
    this.cell.send(delivered ? { type: 'delivery.acked', via } : { type: 'delivery.returned' });
    if (via === 'ask' && !delivered) this.tooLate('the caller hung up as the answer came');
  }

  /** Stops its timers and effects; the log keeps it for the next start. */
  stop(): void {
    this.cell.stop();
  }

  /** The message's envelope, from memory or the store; a missing body dead-letters it loudly. */
  loadEnvelope(): Envelope | undefined {
    if (this.envelope) return this.envelope;
    const stored = readMessage(this.deps.store, this.msgId, this.owner.gid);
    if (!stored.ok) {
      this.deps.logger.error(
        {
          traceId: this.cell.context.traceId,
          msgId: this.msgId,
          recipient: this.owner.name,
          detail: stored.detail,
        },
        'a kept message cannot be delivered: dead-lettered with the reason',
      );
      this.deadLetter('rejected', stored.detail);
      return undefined;
    }
    this.envelope = stored.envelope;
    return stored.envelope;
  }

  // ── Effects of the delivery machine (given to its actor in the constructor), run once their
  // transition is on disk.

  typeIntoPane(): void {
    const step = this.paneStep('injecting');
    step?.injector.type(step.message).then(
      (outcome) => {
        if (outcome.kind === 'typed') this.cell.send({ type: 'delivery.typed' });
        else if (outcome.kind === 'submitted')
          this.cell.send({ type: 'delivery.submitted', how: outcome.how });
        else this.deferred(outcome.reason, outcome.detail);
      },
      (err: unknown) => this.injectFailed(err),
    );
  }

  submitTyped(): void {
    const step = this.paneStep('typed');
    step?.injector.submit(step.message).then(
      (outcome) => {
        if (outcome.kind === 'submitted') this.cell.send({ type: 'delivery.submitted', how: outcome.how });
        else if (outcome.kind === 'not-submitted') {
          this.deps.logger.warn(
            { ...this.logFields(), detail: outcome.detail },
            'typed into the pane but not submitted; Enter will be pressed again',
          );
          this.cell.send({ type: 'delivery.notSubmitted', detail: outcome.detail });
        } else this.deferred(outcome.reason, outcome.detail);
      },
      (err: unknown) => this.injectFailed(err),
    );
  }

  /**
   * Looks at a pane that could not take the message, every `delivery.paneRecheckMs`, until it
   * can; writes nothing to the log meanwhile (a dialog may stay open for hours).
   */
  watchPane(): void {
    const injector = this.owner.injector();
    if (!injector) return;
    const { clock, config, logger } = this.deps;
    const { cell } = this;
    const every = cell.context.recheckMs ?? config.delivery.paneRecheckMs;
    const envelope = this.loadEnvelope();
    const message = envelope && messageOf(envelope);
    const look = (): void => {
      if (cell.state !== 'waiting-pane') return;
      injector.inspect(message).then(
        (hold) => {
          if (cell.state !== 'waiting-pane') return;
          if (hold === undefined) cell.send({ type: 'delivery.paneReady' });
          else clock.setTimeout(look, every);
        },
        (err: unknown) => {
          logger.warn(
            { err, msgId: this.msgId, entity: this.owner.name },
            'could not read the pane; looking again later',
          );
          clock.setTimeout(look, every);
        },
      );
    };
    clock.setTimeout(look, every);
  }

  verifyInjection(): void {
    const step = this.paneStep('verifying');
    step?.injector.locate(step.message).then(
      (where) => this.cell.send({ type: 'delivery.located', where }),
      (err: unknown) => this.injectFailed(err),
    );
  }

  /** Counted and logged (a cross-host message's letter is kept for the broker's DLQ); the body is kept. */
  reportDeadLetter(): void {
    const { context } = this.cell;
    reportDeadLetter(this.deps, context, this.owner.name);
  }

  noticeTooLate(): void {
    const { context } = this.cell;
    const why = context.lastError ?? 'the ask is over';
    this.deps.logger.warn(
      { traceId: context.traceId, msgId: context.msgId, turnId: context.turnId, asker: this.owner.name, why },
      'answer came too late: injected nowhere; its sender is told',
    );
    if (this.envelope) this.deps.onTooLate?.(this.envelope, why);
  }
  /** What a line about a pane step names. */
  private logFields(): { traceId: string; msgId: string; entity: string } {
    return { traceId: this.cell.context.traceId, msgId: this.msgId, entity: this.owner.name };
  }

  /** The envelope from memory or the store, if the store has it (no dead letter if not). */
  private keptEnvelope(): Envelope | undefined {
    return this.envelope ?? storedEnvelope(readMessage(this.deps.store, this.msgId, this.owner.gid));
  }

  private onTransition(transition: Transition): void {
    this.reportReceipt(transition);
    if (transition.to === 'dead-lettered' && transition.from !== 'dead-lettered') this.keepDeadLetter();
    // Submitted, or found submitted by crash recovery: the entity has it (invariant 5).
    if (transition.to === 'submitted' && transition.from !== 'submitted') {
      queueMicrotask(() => this.ackInjected());
    }
    if (transition.done) this.finished(transition.to);
    this.owner.moved(this, transition);
  }

  private finished(state: string): void {
    const { metrics, clock, store } = this.deps;
    const { context } = this.cell;
    metrics.deliveries.inc({ outcome: state });
    if (state === 'too-late') {
      // Its notice (an effect, after commit) still needs the answer: load it before the body goes.
      this.envelope = this.keptEnvelope();
      purgeMessage(store, this.msgId, this.owner.gid);
    }
    if (state === 'acked') {
      purgeMessage(store, this.msgId, this.owner.gid);
      metrics.deliveryLatency.observe({ mode: this.owner.mode }, (clock.now() - context.acceptedAt) / 1000);
    }
  }

  // ── Receipts (R-RC1): which transition tells the sender what is src/deliver/receiptForTransition.ts.
  // The route comes from the envelope while it is in memory; the sink looks it up otherwise.
  private reportReceipt(transition: Transition): void {
    const { context } = this.cell;
    const receipt = this.deps.receipts && receiptForTransition(transition, context, this.deps.clock.now());
    if (!receipt) return;
    const route = { sender: context.sender, senderHost: this.envelope?.from.host, traceId: context.traceId };
    this.deps.receipts?.record(receipt, route);
  }

  /** For a pane step of the delivery in `state`: the pane, and what is typed and shows on it. */
  private paneStep(state: string): { injector: PaneInjector; message: PaneMessage } | undefined {
    const injector = this.owner.injector();
    if (!injector || this.cell.state !== state) return undefined;
    const envelope = this.loadEnvelope();
    if (!envelope) return undefined;
    return {
      injector,
      message: messageOf(envelope),
    };
  }

  private deferred(reason: DeferReason, detail: string): void {
    // A paste that never showed may show later: retrying it spends an attempt, so a pane that
    // keeps losing pastes ends in a dead letter rather than in pastes without end.
    if (reason === DeferReason.notShown) {
      this.injectFailed(new Error(detail));
      return;
    }
    this.deps.logger.info({ ...this.logFields(), reason, detail }, 'pane cannot take the message now; held');
    this.cell.send({ type: 'delivery.deferred', reason, detail });
  }

  private injectFailed(err: unknown): void {
    const error = err instanceof Error ? err.message : String(err);
    this.deps.logger.warn({ err, ...this.logFields() }, 'injection failed; will retry');
    this.cell.send({ type: 'delivery.injectFailed', error });
  }

  /** Whether the message came from another host (its dead letter goes to the broker's DLQ). */
  private crossHost(): boolean {
    // A delivery recorded before its sender's host was has it from its kept envelope.
    const senderHost = this.cell.context.senderHost ?? this.keptEnvelope()?.from.host;
    return senderHost !== undefined && senderHost !== this.owner.host;
  }

  /**
   * A cross-host message dead-lettered here goes to the broker's DLQ with its reason, as one
   * the broker refused would (the operator's one place to look): kept in the outbox in the
   * batch of this transition, so a crash or a broker away meanwhile does not lose it.
   */
  private keepDeadLetter(): void {
    const sink = this.deps.deadLetters;
    if (!sink || !this.crossHost()) return;
    const { context } = this.cell;
    keepCrossHostDeadLetter(this.deps.store, sink, {
      msgId: this.msgId,
      recipient: this.owner.gid,
      reason: context.reason ?? DeadLetterReason.rejected,
      detail: context.lastError ?? '',
    });
  }

  /** Local deliveries are acked as soon as `injected` is recorded: there is no broker to tell. */
  private ackInjected(): void {
    this.cell.send({ type: 'delivery.acked', via: 'pane' });
  }
}

/**
 * Keeps a cross-host message's dead letter in the store's outbox, in the current batch, and has
 * `sink` publish it once that is committed: not an effect of a delivery's, since a deregistered
 * entity stops its deliveries at once.
 */
export function keepCrossHostDeadLetter(store: Store, sink: DeadLetterSink, letter: OutboxDeadLetter): void {
  putOutboxDeadLetter(store, letter);
  store.batch.afterCommit(() => sink.forwardKept());
}

/**
 * Hands `taken` (each already `handed-over`) to a caller as one Handover, settled once: acked
 * on `confirm`, held again on `giveBack`, and then `onReturned` (the pump may go on).
 */
export function createHandover(
  taken: readonly Delivery[],
  envelopes: Envelope[],
  via: HandoverVia,
  onReturned: () => void,
): Handover {
  let settled = false;
  const settle = (delivered: boolean): void => {
    if (settled) return;
    settled = true;
    for (const delivery of taken) delivery.settleHandover(via, delivered);
    if (!delivered) onReturned();
  };
  return { envelopes, confirm: () => settle(true), giveBack: () => settle(false) };
}
