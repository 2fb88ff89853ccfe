import type { Config } from '../config/schema.js';
import { BridgeError, ErrorCode, isBridgeError } from '../errors.js';
import { ActorCell, type Transition } from '../kernel/ActorCell.js';
import type { Clock } from '../kernel/clock.js';
import type { deliveryMachine } from '../machines/deliveryMachine.js';
import { DeliveryMode } from '../machines/deliveryMachine.js';
import { type EntityInput, entityMachine } from '../machines/entityMachine.js';
import type { ActorKind } from '../machines/index.js';
import { nextInjection } from '../machines/nextInjection.js';
import type { remindMachine } from '../machines/remindMachine.js';
import {
  type AgentDescription,
  isReadyStatus,
  type PaneInjector,
  type PaneStatus,
} from '../panes/paneInjector.js';
import { readActorHead } from '../store/actorHeads.js';
import { deliveryActorId } from '../store/actorIds.js';
import type { EntityRecord } from '../store/entities.js';
import { deleteEntity } from '../store/entities.js';
import { readActorEvents } from '../store/readEvents.js';
import type { OwnerDecision } from '../wire/agentHost.js';
import { DeadLetterReason } from '../wire/deadLetterReason.js';
import { type Envelope, WireKind } from '../wire/envelope.js';
import { type InboxCap, type InboxLoad, senderShareRefusal, takesRoom } from '../wire/inboxCap.js';
import type { PaneTarget } from '../wire/paneTarget.js';
import {
  createDeliveryMachine,
  createHandover,
  Delivery,
  type DeliveryDeps,
  type DeliveryOwner,
  deliveryKind,
  type HandoverVia,
  keepCrossHostDeadLetter,
} from './Delivery.js';
import { type DrainWait, DrainWaiters } from './DrainWaiters.js';
import type { AnswerClaims, Handover, InboundHandle } from './handover.js';
import { createRemindMachine, Reminder, type ReminderDeps, type ReminderOwner } from './Reminder.js';
import { type ReplyWait, ReplyWaiters } from './ReplyWaiters.js';

/** The part of the configuration an entity and its deliveries and reminder read. */
export type EntityConfig = Pick<Config, 'delivery' | 'remind'> & {
  broker: Pick<Config['broker'], 'inboxMaxLength'>;
  limits: Pick<Config['limits'], 'inboxMaxBytes' | 'senderInboxShare'>;
};

/** The delivery and remind machines with one gateway's clock, shared by all its entities. */
export interface EntityMachines {
  readonly delivery: typeof deliveryMachine;
  readonly remind: typeof remindMachine;
}

export interface EntityActorDeps extends DeliveryDeps, ReminderDeps {
  config: EntityConfig;
  machines: EntityMachines;
  createInjector: (pane: PaneTarget) => PaneInjector;
  /** Asking turns, which ANSWERs resume (U2). */
  answers?: AnswerClaims | undefined;
  /** The inbox's load changed (a message came or went): the broker may deliver more, or fewer. */
  onInboxLoad?: ((entity: EntityActor) => void) | undefined;
}

/** The result of offering a message to an entity. */
export type AcceptOutcome = 'accepted' | 'duplicate';

export const entityKind: ActorKind = 'entity';

/** Messages a drain took: their deliveries (now handed over) and their envelopes, in order. */
interface Taken {
  deliveries: Delivery[];
  envelopes: Envelope[];
}

const nothingTaken = (): Taken => ({ deliveries: [], envelopes: [] });

/** Made once per gateway: the machines every entity's deliveries and reminder share. */
export function createEntityMachines(clock: Clock): EntityMachines {
  return {
    delivery: createDeliveryMachine(clock),
    remind: createRemindMachine(clock),
  };
}

/**
 * One local entity and its inbox: its entity machine, its undelivered messages in arrival order
 * (per-recipient FIFO, R-DL4), each a `Delivery`, and the way they reach it: typed into its pane
 * one at a time when the pane can take them (R-DL2), or held for an open send or a drain
 * (R-DL3), with a `Reminder` while they wait (U3).
 */
export class EntityActor {
  private readonly deliveries = new Map<string, Delivery>();
  private readonly replies: ReplyWaiters;
  /** Nudges while messages wait: entities that pull their messages, when reminders are on. */
  readonly reminder: Reminder | undefined;
  private readonly owner: DeliveryOwner & ReminderOwner;
  private injector: PaneInjector | undefined;
  private stopWatching: (() => void) | undefined;
  private paneStatus: PaneStatus = 'unknown';
  private lastActive: number | undefined;
  private pumpScheduled = false;
  /** Text bytes of the undelivered messages: with their count, the inbox's load (R-H1). */
  private bytes = 0;
  /** The same load per sender (gid), for each sender's share (R-H8). */
  private readonly bySender = new Map<string, { count: number; bytes: number }>();
  private loadReportScheduled = false;
  /** Deliveries in `held`: the reminder's one input, and what wakes a parked drain. */
  private held = 0;
  private readonly drainWaiters: DrainWaiters;

  private constructor(
    readonly record: EntityRecord,
    private readonly cell: ActorCell<typeof entityMachine>,
    private readonly deps: EntityActorDeps,
  ) {
    this.replies = new ReplyWaiters(deps.clock);
    this.drainWaiters = new DrainWaiters(deps.clock);
    this.owner = {
      gid: record.gid,
      name: record.name,
      host: cell.context.host,
      mode: this.mode,
      injector: () => this.injector,
      moved: (delivery, transition) => this.onDeliveryTransition(delivery, transition),
      oldestHeld: () => this.oldestHeld(),
      readyPane: () => (isReadyStatus(this.paneStatus) ? this.injector : undefined),
    };
    if (this.mode === DeliveryMode.hold && deps.config.remind.enabled && !cell.done) {
      this.reminder = Reminder.open(this.owner, deps);
    }
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

  /**
   * What the roster shows: its state, or `active.blocked` while its agent asks its owner for
   * something (a permission request, a dialog its multiplexer or agent host reports).
   */
  get status(): string {
    return this.paneStatus === 'blocked' && this.cell.state === 'active.busy'
      ? 'active.blocked'
      : this.cell.state;
  }

  /**
   * When it last did something, or something was done for it, since this gateway started (ms):
   * a message accepted for it, one typed into its pane or taken by a drain, its pane's status
   * changing, a message it sent. Undefined until then.
   */
  get lastActiveAt(): number | undefined {
    return this.lastActive;
  }

  /** Notes activity now (see lastActiveAt). */
  touch(): void {
    this.lastActive = this.deps.clock.now();
  }

  /** Its agent behind an agent host, as last seen: path, name, how to watch it. */
  get agent(): AgentDescription | undefined {
    return this.injector?.describe?.();
  }

  /** Messages accepted for this entity and not yet delivered. */
  get depth(): number {
    return this.deliveries.size;
  }

  /** The undelivered messages and their bytes, against the inbox caps (R-H1). */
  get load(): InboxLoad {
    return { count: this.deliveries.size, bytes: this.bytes };
  }

  /**
   * Why this inbox takes no more of `sender`'s messages, `size` bytes more, or undefined: the
   * sender holds its share of the inbox (limits.senderInboxShare). A message it has already is
   * never refused: its copy again is a duplicate, acked as such.
   */
  senderShareRefusal(envelope: Envelope, size: number): string | undefined {
    if (!takesRoom(envelope.kind) || this.deliveries.has(envelope.msgId)) return undefined;
    const mine = this.bySender.get(envelope.from.gid) ?? { count: 0, bytes: 0 };
    return senderShareRefusal(mine, this.cap, this.deps.config.limits.senderInboxShare, size);
  }

  /** The caps every inbox has: messages (broker.inboxMaxLength) and bytes (limits.inboxMaxBytes). */
  get cap(): InboxCap {
    const { config } = this.deps;
    return { maxLength: config.broker.inboxMaxLength, maxBytes: config.limits.inboxMaxBytes };
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
    const ackOnCommit = (): void => {
      if (inbound) this.deps.store.batch.afterCommit(() => inbound.ack());
    };
    if (this.deliveries.has(envelope.msgId)) {
      ackOnCommit();
      return 'duplicate';
    }
    const head = readActorHead(this.deps.store, deliveryKind, deliveryActorId(envelope.msgId, this.gid));
    if (head) {
      // Dead-lettered here once and sent back (a requeue): it goes to the DLQ again rather
      // than be acked into nothing; any other finished one was delivered.
      if (inbound && head.state === 'dead-lettered' && this.deps.deadLetters) {
        keepCrossHostDeadLetter(this.deps.store, this.deps.deadLetters, {
          msgId: envelope.msgId,
          recipient: this.gid,
          reason: DeadLetterReason.rejected,
          detail: 'came again after it was dead-lettered here',
        });
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
    const delivery = Delivery.create(envelope, this.owner, this.deps, inbound);
    this.track(delivery);
    this.touch();
    ackOnCommit();
    delivery.reportAccepted();
    if (envelope.kind === WireKind.answer && this.deps.answers) this.resumeTurn(delivery, envelope);
    else if (this.mode === DeliveryMode.hold) this.hold(delivery);
    else this.schedulePump();
    return 'accepted';
  }

  /**
   * An ANSWER goes to the turn that asked, never into a pane or an inbox: handed to the parked
   * call if the turn still waits for it, otherwise too late (U2).
   */
  private resumeTurn(delivery: Delivery, answer: Envelope): void {
    const claim = this.deps.answers?.claim(this.gid, answer);
    if (!claim?.ok) {
      delivery.tooLate(claim?.why ?? 'no turn takes answers here');
      return;
    }
    delivery.hold();
    delivery.handOver('ask');
    claim.resume(this.handover([delivery], [answer], 'ask'));
  }

  /** Whether message `msgId` was delivered to this entity (accepted for it, here). */
  hasReceived(msgId: string): boolean {
    if (this.deliveries.has(msgId)) return true;
    return readActorHead(this.deps.store, deliveryKind, deliveryActorId(msgId, this.gid)) !== undefined;
  }

  /** Rebuilds one of this entity's deliveries from the log and resumes it. */
  rehydrateDelivery(msgId: string, traceId: string): void {
    const delivery = Delivery.rehydrate(msgId, traceId, this.owner, this.deps);
    this.track(delivery);
    delivery.resume();
    // An answer whose caller died with the gateway: nobody waits for it any more.
    if (delivery.context.kind === WireKind.answer && delivery.state === 'held') {
      delivery.tooLate('the gateway restarted');
    }
    if (this.mode === DeliveryMode.hold && delivery.state === 'pending') this.hold(delivery);
    this.schedulePump();
  }

  /**
   * Hands over up to `max` held messages, oldest first. They are marked handed over, and acked
   * only when the caller confirms that the answer went out (invariant 5): a drain whose answer
   * is lost loses nothing. With `wait` and nothing held, it first parks until a message is held
   * (a long poll: it returns as soon as one arrives), the wait is over, or its signal aborts.
   */
  async drain(max: number, wait?: DrainWait): Promise<Handover> {
    let taken = this.takeHeld(max);
    if (taken.deliveries.length === 0 && wait) taken = await this.parkAndTake(max, wait);
    // Stopped while parked: the gateway is going down and its store with it; nothing was taken.
    if (this.cell.isStopped) return this.handover([], [], 'drain');
    this.reminder?.drained();
    if (taken.deliveries.length > 0) this.touch();
    // Commit `handed-over` before answering. Besides the log, the wait lets the event loop see a
    // connection the main has already dropped, so the answer is known undelivered and the
    // messages are held again rather than acked.
    await this.deps.store.batch.flush();
    return this.handover(taken.deliveries, taken.envelopes, 'drain');
  }

  /** The held messages of a kind (the ASKs a main has not drained yet), oldest first, left held. */
  heldOf(kind: Envelope['kind']): Envelope[] {
    const envelopes: Envelope[] = [];
    for (const delivery of this.deliveries.values()) {
      // The kind is in the delivery's context (a log older than it: read the message to know).
      if (delivery.state !== 'held' || (delivery.context.kind ?? kind) !== kind) continue;
      const envelope = delivery.loadEnvelope();
      if (envelope?.kind === kind) envelopes.push(envelope);
    }
    return envelopes;
  }

  /**
   * Hands one held message over to the operator `by` at the console (to answer an ASK for this
   * main), recorded on its delivery; undefined when it is not held here (drained already).
   */
  async takeForConsole(msgId: string, by: string): Promise<Handover | undefined> {
    const delivery = this.deliveries.get(msgId);
    if (delivery?.state !== 'held') return undefined;
    const envelope = delivery.loadEnvelope();
    if (!envelope) return undefined;
    delivery.handOver('console', by);
    await this.deps.store.batch.flush();
    return this.handover([delivery], [envelope], 'console');
  }

  /** Marks up to `max` held messages handed over, oldest first, and returns them. */
  private takeHeld(max: number): Taken {
    const deliveries: Delivery[] = [];
    const envelopes: Envelope[] = [];
    for (const delivery of this.deliveries.values()) {
      if (deliveries.length >= max) break;
      if (delivery.state !== 'held') continue;
      const envelope = delivery.loadEnvelope();
      if (!envelope) continue;
      delivery.handOver('drain');
      deliveries.push(delivery);
      envelopes.push(envelope);
    }
    return { deliveries, envelopes };
  }

  /**
   * Parks until it can take a held message, `wait.ms` passes, its signal aborts or the entity
   * stops. It takes as soon as it wakes, in the same turn, so of several drains woken by one
   * message one takes it and the others park again for the rest of their wait.
   */
  private async parkAndTake(max: number, { ms, signal }: DrainWait): Promise<Taken> {
    const { clock } = this.deps;
    const deadline = clock.now() + ms;
    for (;;) {
      const left = deadline - clock.now();
      if (left <= 0 || this.cell.isStopped || this.cell.done || signal?.aborted) return nothingTaken();
      await this.drainWaiters.wait(left, signal);
      if (this.cell.isStopped) return nothingTaken();
      const taken = this.takeHeld(max);
      if (taken.deliveries.length > 0) return taken;
    }
  }

  private handover(taken: Delivery[], envelopes: Envelope[], via: HandoverVia): Handover {
    return createHandover(taken, envelopes, via, () => this.schedulePump());
  }

  /**
   * Parks until a message from `peer` (or one answering `msgId`) arrives for this entity, or
   * `ms` passes (R-DL3). Register before sending, so a fast reply cannot slip past.
   */
  waitForReply(peer: string | undefined, ms: number): ReplyWait {
    return this.replies.wait(peer, ms);
  }

  /**
   * Passes its owner's answer to a permission request of its agent (the oldest open one, or
   * `request`) to the agent host it runs behind, and records it once the host took it (who
   * answered, which request, how). Rejects, recording nothing, when its agent has no such
   * request or does not run behind an agent host.
   */
  async answerOwner(decision: OwnerDecision, by: string, request?: number): Promise<number> {
    const answer = this.injector?.answerOwner;
    if (!this.injector || !answer) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${this.record.name} runs in a terminal pane: answer its agent there (approve and deny are for workers behind an agent host)`,
      );
    }
    if (!this.cell.can({ type: 'entity.ownerAnswered', request: 1, decision, by })) {
      throw new BridgeError(
        ErrorCode.notAvailable,
        `${this.record.name} is not active yet (its agent host has not reported): retry in a moment`,
        { retryable: true },
      );
    }
    let answered: number;
    try {
      answered = await answer.call(this.injector, decision, request);
    } catch (err) {
      // No answer from its agent host (PANE_UNAVAILABLE) is not a refusal: the host may have taken it.
      const unanswered = isBridgeError(err) && err.code === ErrorCode.paneUnavailable;
      throw new BridgeError(
        unanswered ? ErrorCode.paneUnavailable : ErrorCode.badRequest,
        `${this.record.name}: ${(err as Error).message}`,
        { retryable: unanswered, cause: err },
      );
    }
    this.cell.send({ type: 'entity.ownerAnswered', request: answered, decision, by });
    await this.deps.store.batch.flush();
    return answered;
  }

  /** Ends this entity: undelivered messages are dead-lettered (never dropped) and it is forgotten. */
  deregister(): void {
    for (const delivery of [...this.deliveries.values()]) delivery.deadLetter('recipient-gone');
    this.reminder?.end();
    this.cell.send({ type: 'entity.deregistered' });
    deleteEntity(this.deps.store, this.gid);
    void this.stop();
  }

  /** Stops timers and the pane connection; the log keeps everything for the next start. */
  async stop(): Promise<void> {
    this.stopWatching?.();
    this.replies.cancelAll();
    for (const delivery of this.deliveries.values()) delivery.stop();
    this.reminder?.stop();
    this.cell.stop();
    this.drainWaiters.wakeAll();
    await this.injector?.close();
  }

  /**
   * Counts a delivery in the inbox's load as it stands now; its transitions move the counts on
   * from there (onDeliveryTransition). A new one and one rebuilt from the log alike: one rebuilt
   * in `held` is counted held here, one rebuilt handed over is counted when it comes back.
   */
  private track(delivery: Delivery): void {
    this.deliveries.set(delivery.msgId, delivery);
    this.bytes += delivery.context.size;
    this.countSender(delivery, +1);
    if (delivery.state === 'held') this.countHeld(+1);
    this.reportLoad();
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

  private countSender(delivery: Delivery, delta: 1 | -1): void {
    const { sender, size } = delivery.context;
    const load = this.bySender.get(sender) ?? { count: 0, bytes: 0 };
    load.count += delta;
    load.bytes += delta * size;
    if (load.count <= 0) this.bySender.delete(sender);
    else this.bySender.set(sender, load);
  }

  private countHeld(delta: number): void {
    this.held += delta;
    this.reminder?.heldChanged(this.held);
    if (this.held > 0) this.drainWaiters.wakeAll();
  }

  /** The oldest message held for a drain, for a nudge. */
  private oldestHeld(): { acceptedAt: number; from: string } | undefined {
    for (const delivery of this.deliveries.values()) {
      if (delivery.state !== 'held') continue;
      const envelope = delivery.loadEnvelope();
      const from = envelope ? `${envelope.from.name}@${envelope.from.host}` : 'unknown';
      return { acceptedAt: delivery.context.acceptedAt, from };
    }
    return undefined;
  }

  private hold(delivery: Delivery): void {
    delivery.hold();
    const envelope = delivery.loadEnvelope();
    if (!envelope) return;
    const resolve = this.replies.take(envelope);
    if (!resolve) return;
    delivery.handOver('open-send');
    const handover = this.handover([delivery], [envelope], 'open-send');
    queueMicrotask(() => resolve(handover));
  }

  private onPaneStatus(status: PaneStatus): void {
    // Its first status since the gateway started is no news of the agent.
    if (this.paneStatus !== 'unknown' && status !== this.paneStatus) this.touch();
    this.paneStatus = status;
    if (this.cell.state === 'registered') this.cell.send({ type: 'entity.activated' });
    if (isReadyStatus(status)) this.cell.send({ type: 'entity.idle' });
    else this.cell.send({ type: 'entity.busy', status });
    this.schedulePump();
  }

  private onDeliveryTransition(delivery: Delivery, transition: Transition): void {
    if (transition.to === 'typed' || transition.to === 'submitted') this.touch();
    if (transition.to === 'held' && transition.from !== 'held') this.countHeld(+1);
    else if (transition.from === 'held' && transition.to !== 'held') this.countHeld(-1);
    if (transition.done) {
      this.deliveries.delete(delivery.msgId);
      this.bytes -= delivery.context.size;
      this.countSender(delivery, -1);
      this.reportLoad();
    }
    this.schedulePump();
  }

  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    queueMicrotask(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Types the oldest pending message when the pane can take it (`nextInjection`). */
  private pump(): void {
    const view = {
      injecting: this.mode === DeliveryMode.inject && this.injector !== undefined,
      paneReady: isReadyStatus(this.paneStatus),
    };
    const next = nextInjection(view, this.deliveries.values());
    if (next.verdict === 'inject') next.delivery.inject();
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
