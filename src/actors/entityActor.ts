import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode } from '../errors.js';
import { formatInjection, injectionMarker } from '../inject/formatInjection.js';
import {
  DeferReason,
  isReadyStatus,
  type PaneInjector,
  type PaneMessage,
  type PaneStatus,
  type PaneTarget,
} from '../inject/paneInjector.js';
import { typeAndSubmit } from '../inject/typeAndSubmit.js';
import {
  type DeadLetterReason,
  type DeliveryContext,
  type DeliveryEvent,
  DeliveryMode,
  deliveryMachine,
} from '../machines/deliveryMachine.js';
import { type EntityInput, entityMachine } from '../machines/entityMachine.js';
import type { ActorKind } from '../machines/index.js';
import { type RemindEvent, remindMachine } from '../machines/remindMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import type { ReceiptSink } from '../receipts/receipt.js';
import { receiptForTransition } from '../receipts/receiptForTransition.js';
import { ActorCell, type RuntimeDeps, type Transition } from '../runtime/actorCell.js';
import { deliveryActorId, remindActorId } from '../runtime/actorIds.js';
import { readActorHead } from '../store/actorHeads.js';
import type { EntityRecord } from '../store/entities.js';
import { deleteEntity } from '../store/entities.js';
import { purgeMessage, putMessage, readMessage, storedEnvelope } from '../store/messageBodies.js';
import { readActorEvents } from '../store/readEvents.js';
import { byteLength, digestText } from '../wire/digest.js';
import { type Envelope, WireKind } from '../wire/envelope.js';
import { type InboxCap, type InboxLoad, inboxRefusal } from '../wire/inboxCap.js';
import type { AnswerClaims } from './turns.js';

/** A received broker message, as far as a delivery needs it: acked once the store has it. */
export interface InboundHandle {
  ack(): void;
}

/** Where dead letters of cross-host messages go (the broker's DLQ, with their reason). */
export interface DeadLetterSink {
  deadLetter(envelope: Envelope, reason: DeadLetterReason, detail: string | null): void;
}

/** A reminder that messages wait for an entity that pulls them (U3). */
export interface Nudge {
  readonly entity: string;
  readonly name: string;
  readonly waiting: number;
  /** When the oldest waiting message arrived (ms since epoch), and from whom. */
  readonly oldestAt: number;
  readonly oldestFrom: string;
  readonly text: string;
}

export interface EntityActorDeps extends RuntimeDeps {
  config: Config;
  metrics: Metrics;
  createInjector: (pane: PaneTarget) => PaneInjector;
  deadLetters?: DeadLetterSink | undefined;
  /** Asking turns, which ANSWERs resume (U2). */
  answers?: AnswerClaims | undefined;
  /** An answer came too late for its turn: tell its sender (TOO_LATE). */
  onTooLate?: ((answer: Envelope, why: string) => void) | undefined;
  /** A nudge went out (besides the pane, interfaces pass it on: MCP notifications). */
  onNudge?: ((nudge: Nudge) => void) | undefined;
  /** Where the stages of deliveries go back to their senders (R-RC1). */
  receipts?: ReceiptSink | undefined;
  /** The inbox's load changed (a message came or went): the broker may deliver more, or fewer. */
  onInboxLoad?: ((entity: EntityActor) => void) | undefined;
}

type DeliveryCell = ActorCell<typeof deliveryMachine>;

interface LiveDelivery {
  readonly cell: DeliveryCell;
  /** Loaded lazily after a restart; the store has it until the delivery finishes. */
  envelope: Envelope | undefined;
}

interface ReplyWaiter {
  /** Any message from this gid resolves it; undefined: only one answering `msgId`. */
  readonly peer: string | undefined;
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
export const remindKind: ActorKind = 'remind';

type RemindCell = ActorCell<typeof remindMachine>;

interface SharedMachines {
  readonly delivery: typeof deliveryMachine;
  readonly remind: typeof remindMachine;
  /** The gateway's entity actors by gid: where an effect of a shared machine goes. */
  readonly actors: Map<string, EntityActor>;
}

const sharedMachines = new WeakMap<EntityActorDeps, SharedMachines>();

/**
 * One local entity and everything addressed to it: its entity machine, one delivery actor per
 * undelivered message in arrival order (per-recipient FIFO, R-DL4), and the way messages reach
 * it: typed into its pane one at a time when the pane can take them (R-DL2), or held for an
 * open send or a drain (R-DL3).
 */
export class EntityActor {
  private readonly deliveries = new Map<string, LiveDelivery>();
  private readonly waiters: ReplyWaiter[] = [];
  private readonly machines: SharedMachines;
  private injector: PaneInjector | undefined;
  private stopWatching: (() => void) | undefined;
  private paneStatus: PaneStatus = 'unknown';
  private pumpScheduled = false;
  /** Text bytes of the undelivered messages: with their count, the inbox's load (R-H1). */
  private bytes = 0;
  private loadReportScheduled = false;
  /** Deliveries in `held`: what a nudge counts, and what starts and stops the reminder. */
  private held = 0;
  /** Answers gone too-late whose TOO_LATE notice has not gone out yet. */
  private readonly lateAnswers = new Map<string, Envelope>();
  private remind: RemindCell | undefined;
  private reminderSyncScheduled = false;

  private constructor(
    readonly record: EntityRecord,
    private readonly cell: ActorCell<typeof entityMachine>,
    private readonly deps: EntityActorDeps,
  ) {
    this.machines = EntityActor.machinesFor(deps);
    this.machines.actors.set(record.gid, this);
    if (this.mode === DeliveryMode.hold && deps.config.remind.enabled && !cell.done) {
      this.remind = this.openReminder();
    }
  }

  /**
   * The delivery and remind machines with this gateway's effects, made once per gateway and
   * shared by all its entities: an effect finds its entity by the recipient in the context. (A
   * machine per entity cost ~30 KB each: 10,000 entities held 3,000 machine definitions.)
   */
  private static machinesFor(deps: EntityActorDeps): SharedMachines {
    const known = sharedMachines.get(deps);
    if (known) return known;
    const actors = new Map<string, EntityActor>();
    const { clock } = deps;
    const delivery = deliveryMachine.provide({
      actions: {
        typeIntoPane: ({ context }) => actors.get(context.recipient)?.typeIntoPane(context.msgId),
        submitTyped: ({ context }) => actors.get(context.recipient)?.submitTyped(context.msgId),
        watchPane: ({ context }) => actors.get(context.recipient)?.watchPane(context.msgId),
        verifyInjection: ({ context }) => actors.get(context.recipient)?.verifyInjection(context.msgId),
        deadLetter: ({ context }) => actors.get(context.recipient)?.reportDeadLetter(context),
        noticeTooLate: ({ context }) => actors.get(context.recipient)?.noticeTooLate(context),
      },
      delays: {
        untilDeadline: ({ context }) => Math.max(0, context.deadline - clock.now()),
      },
    });
    const remind = remindMachine.provide({
      actions: { nudge: ({ context }) => queueMicrotask(() => actors.get(context.entity)?.nudge()) },
      delays: { untilDue: ({ context }) => Math.max(0, context.dueAt - clock.now()) },
    });
    const machines: SharedMachines = { delivery, remind, actors };
    sharedMachines.set(deps, machines);
    return machines;
  }

  /** The entity's reminder actor: rebuilt from the log, or new. */
  private openReminder(): RemindCell {
    const { config } = this.deps;
    const machine = this.machines.remind;
    const id = remindActorId(this.gid);
    const identity = { kind: remindKind, id, traceId: this.gid, msgId: null, owner: this.gid };
    const rows = readActorEvents(this.deps.store, remindKind, id);
    if (rows.length > 0) {
      const cell = ActorCell.rehydrate(machine, rows, identity, this.deps);
      cell.send({ type: 'actor.rehydrated' });
      return cell;
    }
    return ActorCell.create(
      machine,
      { entity: this.gid, firstMs: config.remind.firstMs, maxMs: config.remind.maxMs },
      identity,
      this.deps,
    );
  }

  /** A newly registered entity. */
  static create(record: EntityRecord, host: string, deps: EntityActorDeps): EntityActor {
    const cell = ActorCell.create(
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
    const cell = ActorCell.rehydrate(
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

  /**
   * Workers in panes get messages typed in; mains and orchestrators pull them (R-DL3), and
   * their pane, if they have one, only gets reminders (U3).
   */
  get mode(): DeliveryMode {
    return modeOf(this.record);
  }

  /** registered, active.idle, active.busy or gone. */
  get state(): string {
    return this.cell.state;
  }

  /** Messages accepted for this entity and not yet delivered. */
  get depth(): number {
    return this.deliveries.size;
  }

  /** The undelivered messages and their bytes, against the inbox caps (R-H1). */
  get load(): InboxLoad {
    return { count: this.deliveries.size, bytes: this.bytes };
  }

  /** The caps every inbox has: messages (broker.inboxMaxLength) and bytes (limits.inboxMaxBytes). */
  get cap(): InboxCap {
    const { config } = this.deps;
    return { maxLength: config.broker.inboxMaxLength, maxBytes: config.limits.inboxMaxBytes };
  }

  /**
   * Throws INBOX_FULL if one more message of `size` text bytes does not fit: what a same-host
   * sender is told, as a cross-host one is told by the broker's capped queue (R-H1).
   */
  checkRoom(size: number): void {
    const refusal = inboxRefusal(this.load, this.cap, size);
    if (refusal === undefined) return;
    throw new BridgeError(
      ErrorCode.inboxFull,
      `${this.record.name}'s inbox is full: ${refusal}; the message was not accepted. ` +
        'Retry later, or ask its owner to drain it',
      { retryable: true },
    );
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
   * Accepts a message for this entity, durably once the current batch commits; a message from
   * the broker (`inbound`) is acked then: from there on the local store is its durable copy,
   * so a delivery may wait for a pane or a drain for as long as it takes without holding a
   * broker delivery open (consumer_timeout, R-H6). A msgId this entity already has (live or
   * finished) is a duplicate and changes nothing (invariant 5); its broker copy is acked too.
   */
  accept(envelope: Envelope, inbound?: InboundHandle): AcceptOutcome {
    const id = deliveryActorId(envelope.msgId, this.gid);
    const ackOnCommit = (): void => {
      if (inbound) this.deps.store.batch.afterCommit(() => inbound.ack());
    };
    if (this.deliveries.has(envelope.msgId)) {
      ackOnCommit();
      return 'duplicate';
    }
    const head = readActorHead(this.deps.store, deliveryKind, id);
    if (head) {
      // Dead-lettered here once and sent back (a requeue): it goes to the DLQ again rather
      // than be acked into nothing; any other finished one was delivered.
      if (inbound && head.state === 'dead-lettered') {
        this.deps.deadLetters?.deadLetter(envelope, 'rejected', 'came again after it was dead-lettered here');
      }
      ackOnCommit();
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
    const cell = ActorCell.create(
      this.machines.delivery,
      {
        msgId: envelope.msgId,
        traceId: envelope.traceId,
        recipient: this.gid,
        sender: envelope.from.gid,
        mode: this.mode,
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
      { kind: deliveryKind, id, traceId: envelope.traceId, msgId: envelope.msgId, owner: this.gid },
      this.deps,
    );
    const live = this.track(cell, envelope);
    ackOnCommit();
    this.reportReceipt(live, { event: 'xstate.init', from: null, to: cell.state, done: false, data: null });
    if (envelope.kind === WireKind.answer && this.deps.answers) this.resumeTurn(live, envelope);
    else if (this.mode === DeliveryMode.hold) this.hold(envelope.msgId);
    else this.schedulePump();
    return 'accepted';
  }

  /**
   * An ANSWER goes to the turn that asked, never into a pane or an inbox: handed to the parked
   * call if the turn still waits for it, otherwise too late (U2).
   */
  private resumeTurn(live: LiveDelivery, answer: Envelope): void {
    const claim = this.deps.answers?.claim(this.gid, answer);
    const turnId = answer.turnId ?? '';
    if (!claim?.ok) {
      live.cell.send({ type: 'delivery.tooLate', turnId, why: claim?.why ?? 'no turn takes answers here' });
      return;
    }
    live.cell.send({ type: 'delivery.hold' });
    live.cell.send({ type: 'delivery.handedOver', via: 'ask' });
    claim.resume(this.handover([live], [answer], 'ask'));
  }

  /** Whether message `msgId` was delivered to this entity (accepted for it, here). */
  hasReceived(msgId: string): boolean {
    if (this.deliveries.has(msgId)) return true;
    return readActorHead(this.deps.store, deliveryKind, deliveryActorId(msgId, this.gid)) !== undefined;
  }

  /** Rebuilds one of this entity's deliveries from the log and resumes it. */
  rehydrateDelivery(msgId: string, traceId: string): void {
    const id = deliveryActorId(msgId, this.gid);
    const rows = readActorEvents(this.deps.store, deliveryKind, id);
    const cell = ActorCell.rehydrate(
      this.machines.delivery,
      rows,
      { kind: deliveryKind, id, traceId, msgId, owner: this.gid },
      this.deps,
    );
    // Held before the restart: re-entering `held` is no transition the count sees, so count it
    // here. One handed over before the restart comes back to `held` through a transition, which
    // onDeliveryTransition already counted.
    const wasHeld = cell.state === 'held';
    this.track(cell, undefined);
    cell.send({ type: 'actor.rehydrated' });
    // A message submitted before the crash but not yet acked: ack it now.
    if (cell.state === 'submitted') this.ackInjected(cell);
    if (wasHeld && cell.state === 'held') this.countHeld(+1);
    // An answer whose caller died with the gateway: nobody waits for it any more.
    if (cell.context.kind === WireKind.answer && cell.state === 'held') {
      cell.send({
        type: 'delivery.tooLate',
        turnId: cell.context.turnId ?? '',
        why: 'the gateway restarted',
      });
    }
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
    // A drain answers the reminder: quiet now, and a new round if messages are still held.
    if (this.remind && this.remind.state !== 'quiet') {
      this.remind.send({ type: 'remind.drained', at: this.deps.clock.now() });
      this.scheduleReminderSync();
    }
    await this.deps.store.batch.flush();
    return this.handover(taken, envelopes, 'drain');
  }

  private handover(
    taken: LiveDelivery[],
    envelopes: Envelope[],
    via: 'drain' | 'open-send' | 'ask',
  ): Handover {
    let settled = false;
    const settle = (event: DeliveryEvent) => {
      if (settled) return;
      settled = true;
      for (const live of taken) {
        if (live.cell.state !== 'handed-over') continue;
        live.cell.send(event);
        // An answer that never reached its caller is not offered to anyone else.
        if (via === 'ask' && event.type === 'delivery.returned') {
          const turnId = live.cell.context.turnId ?? '';
          live.cell.send({ type: 'delivery.tooLate', turnId, why: 'the caller hung up as the answer came' });
        }
      }
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
    peer: string | undefined,
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
    this.remind?.send({ type: 'remind.ended' });
    this.cell.send({ type: 'entity.deregistered' });
    deleteEntity(this.deps.store, this.gid);
    void this.stop();
  }

  /** Stops timers and the pane connection; the log keeps everything for the next start. */
  async stop(): Promise<void> {
    this.stopWatching?.();
    for (const waiter of this.waiters.splice(0)) waiter.resolve(null);
    for (const live of this.deliveries.values()) live.cell.stop();
    this.remind?.stop();
    this.cell.stop();
    if (this.machines.actors.get(this.gid) === this) this.machines.actors.delete(this.gid);
    await this.injector?.close();
  }

  private track(cell: DeliveryCell, envelope: Envelope | undefined): LiveDelivery {
    const msgId = cell.context.msgId;
    const live: LiveDelivery = { cell, envelope };
    this.deliveries.set(msgId, live);
    this.bytes += cell.context.size;
    this.reportLoad();
    cell.onTransition = (transition) => this.onDeliveryTransition(msgId, live, transition);
    return live;
  }

  /** Tells the federation, once per tick, that the inbox's load changed. */
  private reportLoad(): void {
    if (!this.deps.onInboxLoad || this.loadReportScheduled) return;
    this.loadReportScheduled = true;
    queueMicrotask(() => {
      this.loadReportScheduled = false;
      this.deps.onInboxLoad?.(this);
    });
  }

  /** Keeps the held count, and starts or ends the reminder's round when it leaves or hits 0. */
  private countHeld(delta: number): void {
    this.held += delta;
    this.scheduleReminderSync();
  }

  /**
   * Brings the reminder in line with the held count once the current tick is done, so a
   * message that is held and handed over in the same tick (a reply to an open send, an
   * answer) starts no round and writes no rows.
   */
  private scheduleReminderSync(): void {
    if (!this.remind || this.reminderSyncScheduled) return;
    this.reminderSyncScheduled = true;
    queueMicrotask(() => {
      this.reminderSyncScheduled = false;
      const remind = this.remind;
      if (!remind || remind.done) return;
      const at = this.deps.clock.now();
      if (this.held > 0 && remind.state === 'quiet') remind.send(this.heldEvent(at));
      else if (this.held === 0 && remind.state !== 'quiet') remind.send({ type: 'remind.drained', at });
    });
  }

  /** A new round of reminders, with the intervals configured now. */
  private heldEvent(at: number): RemindEvent {
    const { firstMs, maxMs } = this.deps.config.remind;
    return { type: 'remind.held', at, count: this.held, firstMs, maxMs };
  }

  /** Reminds the entity that messages wait: its pane (when it can take input), and listeners. */
  private nudge(): void {
    const remind = this.remind;
    if (remind?.state !== 'nudging') return;
    const oldest = [...this.deliveries.values()].find((live) => live.cell.state === 'held');
    const now = this.deps.clock.now();
    // Nothing waits after all (e.g. drained while reminders were off): end the round rather
    // than log a silent nudge every maxMs forever.
    if (!oldest) {
      remind.send({ type: 'remind.drained', at: now });
      return;
    }
    if (this.held > 0) {
      const envelope = this.envelopeOf(oldest.cell.context.msgId, oldest);
      const oldestFrom = envelope ? `${envelope.from.name}@${envelope.from.host}` : 'unknown';
      const ago = Math.max(0, Math.round((now - oldest.cell.context.acceptedAt) / 1000));
      const s = this.held === 1 ? '' : 's';
      const text =
        `[bridge NUDGE] ${this.held} message${s} waiting for you (oldest from ${oldestFrom}, ${ago} s ago): ` +
        'call bridge_drain';
      const nudge: Nudge = {
        entity: this.gid,
        name: this.record.name,
        waiting: this.held,
        oldestAt: oldest.cell.context.acceptedAt,
        oldestFrom,
        text,
      };
      this.deps.metrics.nudges.inc();
      this.deps.logger.info(
        { entity: this.record.name, waiting: this.held, nudges: remind.context.nudges + 1 },
        'nudged: messages wait for a drain',
      );
      if (this.injector && isReadyStatus(this.paneStatus)) {
        const marker = `NUDGE ${now}`;
        const entity = this.record.name;
        typeAndSubmit(this.injector, { text, marker }).then(
          (outcome) => {
            if (outcome.kind !== 'submitted') {
              this.deps.logger.info(
                { entity, outcome },
                'nudge not typed into the pane: it cannot take input now',
              );
            }
          },
          (err: unknown) => this.deps.logger.warn({ err, entity }, 'could not type a nudge into the pane'),
        );
      }
      this.deps.onNudge?.(nudge);
    }
    remind.send({ type: 'remind.nudged', at: now });
  }

  private hold(msgId: string): void {
    const live = this.deliveries.get(msgId);
    if (!live) return;
    live.cell.send({ type: 'delivery.hold' });
    const envelope = this.envelopeOf(msgId, live);
    if (!envelope) return;
    const index = this.waiters.findIndex(
      (w) =>
        (w.peer !== undefined && w.peer === envelope.from.gid) ||
        (w.msgId !== undefined && w.msgId === envelope.inReplyTo),
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

  // ── Receipts (R-RC1): which transition tells the sender what is src/receipts/receiptForTransition.ts.
  // The route comes from the envelope while it is in memory; the sink looks it up otherwise.
  private reportReceipt(live: LiveDelivery, transition: Transition): void {
    const { context } = live.cell;
    const receipt = this.deps.receipts && receiptForTransition(transition, context, this.deps.clock.now());
    if (!receipt) return;
    const route = { sender: context.sender, senderHost: live.envelope?.from.host, traceId: context.traceId };
    this.deps.receipts?.record(receipt, route);
  }
  // ── end of receipts

  private onDeliveryTransition(msgId: string, live: LiveDelivery, transition: Transition): void {
    const { cell } = live;
    this.reportReceipt(live, transition);
    if (transition.to === 'held' && transition.from !== 'held') this.countHeld(+1);
    else if (transition.from === 'held' && transition.to !== 'held') this.countHeld(-1);
    // Submitted, or found submitted by crash recovery: the entity has it (invariant 5).
    if (transition.to === 'submitted' && transition.from !== 'submitted') {
      queueMicrotask(() => this.ackInjected(cell));
    }
    if (transition.done) {
      this.deliveries.delete(msgId);
      this.bytes -= cell.context.size;
      this.reportLoad();
      const { metrics, clock } = this.deps;
      metrics.deliveries.inc({ outcome: transition.to });
      if (transition.to === 'too-late') {
        // Its notice (an effect, after commit) still needs the answer: keep it until then.
        const answer = live.envelope ?? storedEnvelope(readMessage(this.deps.store, msgId, this.gid));
        if (answer) this.lateAnswers.set(msgId, answer);
        purgeMessage(this.deps.store, msgId, this.gid);
      }
      if (transition.to === 'acked') {
        purgeMessage(this.deps.store, msgId, this.gid);
        metrics.deliveryLatency.observe({ mode: this.mode }, (clock.now() - cell.context.acceptedAt) / 1000);
      }
      if (transition.to === 'dead-lettered') this.forwardDeadLetter(live);
    }
    this.schedulePump();
  }

  /**
   * A cross-host message dead-lettered here goes to the broker's DLQ with its reason once the
   * transition is on disk, as one the broker refused would (the operator's one place to look).
   */
  private forwardDeadLetter(live: LiveDelivery): void {
    const sink = this.deps.deadLetters;
    if (!sink) return;
    this.deps.store.batch.afterCommit(() => {
      const { context } = live.cell;
      const envelope = live.envelope ?? storedEnvelope(readMessage(this.deps.store, context.msgId, this.gid));
      if (!envelope || envelope.from.host === this.cell.context.host) return;
      sink.deadLetter(envelope, context.reason ?? 'rejected', context.lastError);
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
      if (state === 'submitted') continue; // submitted, waiting for its ack: not in the way
      if (state === 'pending') live.cell.send({ type: 'delivery.inject' });
      return; // the head is being typed, verified or retried: the rest wait (FIFO)
    }
  }

  /** What is typed for a message, and what identifies it on screen. */
  private paneMessage(envelope: Envelope): PaneMessage {
    return { text: formatInjection(envelope), marker: injectionMarker(envelope.msgId) };
  }

  /** The pane step for a delivery in `state`: its envelope and the injector, or nothing to do. */
  private paneStep(
    msgId: string,
    state: string,
  ): { live: LiveDelivery; injector: PaneInjector; message: PaneMessage } | undefined {
    const live = this.deliveries.get(msgId);
    const injector = this.injector;
    if (!live || !injector || live.cell.state !== state) return undefined;
    const envelope = this.envelopeOf(msgId, live);
    if (!envelope) return undefined;
    return { live, injector, message: this.paneMessage(envelope) };
  }

  private typeIntoPane(msgId: string): void {
    const step = this.paneStep(msgId, 'injecting');
    if (!step) return;
    const { cell } = step.live;
    step.injector.type(step.message).then(
      (outcome) => {
        if (outcome.kind === 'typed') cell.send({ type: 'delivery.typed' });
        else if (outcome.kind === 'submitted') cell.send({ type: 'delivery.submitted', how: outcome.how });
        else this.deferred(cell, outcome.reason, outcome.detail);
      },
      (err: unknown) => this.injectFailed(cell, err),
    );
  }

  private submitTyped(msgId: string): void {
    const step = this.paneStep(msgId, 'typed');
    if (!step) return;
    const { cell } = step.live;
    step.injector.submit(step.message).then(
      (outcome) => {
        if (outcome.kind === 'submitted') cell.send({ type: 'delivery.submitted', how: outcome.how });
        else if (outcome.kind === 'not-submitted') {
          this.deps.logger.warn(
            { traceId: cell.context.traceId, msgId, entity: this.record.name, detail: outcome.detail },
            'typed into the pane but not submitted; Enter will be pressed again',
          );
          cell.send({ type: 'delivery.notSubmitted', detail: outcome.detail });
        } else this.deferred(cell, outcome.reason, outcome.detail);
      },
      (err: unknown) => this.injectFailed(cell, err),
    );
  }

  private deferred(cell: DeliveryCell, reason: DeferReason, detail: string): void {
    // A paste that never showed may show later: retrying it spends an attempt, so a pane that
    // keeps losing pastes ends in a dead letter rather than in pastes without end.
    if (reason === DeferReason.notShown) {
      this.injectFailed(cell, new Error(detail));
      return;
    }
    this.deps.logger.info(
      { traceId: cell.context.traceId, msgId: cell.context.msgId, entity: this.record.name, reason, detail },
      'pane cannot take the message now; held',
    );
    cell.send({ type: 'delivery.deferred', reason, detail });
  }

  /**
   * Looks at a pane that could not take a message, every `delivery.paneRecheckMs`, until it
   * can; writes nothing to the log meanwhile (a dialog may stay open for hours).
   */
  private watchPane(msgId: string): void {
    const live = this.deliveries.get(msgId);
    const injector = this.injector;
    if (!live || !injector) return;
    const { clock, config, logger } = this.deps;
    const every = live.cell.context.recheckMs ?? config.delivery.paneRecheckMs;
    const look = (): void => {
      if (live.cell.state !== 'waiting-pane' || this.deliveries.get(msgId) !== live) return;
      injector.inspect().then(
        (hold) => {
          if (live.cell.state !== 'waiting-pane') return;
          if (hold === undefined) live.cell.send({ type: 'delivery.paneReady' });
          else clock.setTimeout(look, every);
        },
        (err: unknown) => {
          logger.warn(
            { err, msgId, entity: this.record.name },
            'could not read the pane; looking again later',
          );
          clock.setTimeout(look, every);
        },
      );
    };
    clock.setTimeout(look, every);
  }

  private verifyInjection(msgId: string): void {
    const step = this.paneStep(msgId, 'verifying');
    if (!step) return;
    const { cell } = step.live;
    step.injector.locate(step.message).then(
      (where) => cell.send({ type: 'delivery.located', where }),
      (err: unknown) => this.injectFailed(cell, err),
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

  private noticeTooLate(context: DeliveryContext): void {
    const answer = this.lateAnswers.get(context.msgId);
    this.lateAnswers.delete(context.msgId);
    const why = context.lastError ?? 'the ask is over';
    this.deps.logger.warn(
      {
        traceId: context.traceId,
        msgId: context.msgId,
        turnId: context.turnId,
        asker: this.record.name,
        why,
      },
      'answer came too late: injected nowhere; its sender is told',
    );
    if (answer) this.deps.onTooLate?.(answer, why);
  }

  /** The message's envelope, from memory or the store; a missing body dead-letters it loudly. */
  private envelopeOf(msgId: string, live: LiveDelivery): Envelope | undefined {
    if (live.envelope) return live.envelope;
    const stored = readMessage(this.deps.store, msgId, this.gid);
    if (!stored.ok) {
      this.deps.logger.error(
        { traceId: live.cell.context.traceId, msgId, recipient: this.record.name, detail: stored.detail },
        'a kept message cannot be delivered: dead-lettered with the reason',
      );
      live.cell.send({ type: 'delivery.deadLettered', reason: 'rejected', detail: stored.detail });
      return undefined;
    }
    live.envelope = stored.envelope;
    return stored.envelope;
  }
}

function modeOf(record: EntityRecord): DeliveryMode {
  return record.kind === 'worker' && record.pane !== null ? DeliveryMode.inject : DeliveryMode.hold;
}

function inputOf(record: EntityRecord, host: string): EntityInput {
  return {
    gid: record.gid,
    name: record.name,
    kind: record.kind,
    host,
    groups: record.groups,
    mode: modeOf(record),
  };
}
