import type {
  AnyMachineSnapshot,
  AnyStateMachine,
  ContextFrom,
  EventFromLogic,
  EventObject,
  InputFrom,
} from 'xstate';
import type { Logger } from '../log/logger.js';
import type { ActorKind } from '../machines/index.js';
import { appendEvent } from '../store/appendEvent.js';
import type { EventRow } from '../store/eventRow.js';
import type { Store } from '../store/openStore.js';
import type { Hlc } from '../wire/hlc.js';
import type { Clock } from './clock.js';
import { foldEvents } from './foldEvents.js';
import { initEvent } from './parseRecordedEvent.js';
import { pureInitialTransition, pureTransition } from './pureTransition.js';
import { stateName } from './stateName.js';

/** What every actor cell needs from the gateway. */
export interface RuntimeDeps {
  store: Store;
  hlc: Hlc;
  clock: Clock;
  host: string;
  logger: Logger;
}

export interface ActorIdentity {
  kind: ActorKind;
  id: string;
  traceId: string;
  msgId: string | null;
  /** The actor's owner (a delivery's recipient) for rehydration by owner. */
  owner?: string | null;
}

export interface Transition {
  event: string;
  from: string | null;
  to: string;
  done: boolean;
  /** The event's payload without its type, as recorded (null when it has none). */
  data: Record<string, unknown> | null;
}

/**
 * The effects an actor's machine names (its named actions), given to one actor when it is
 * created or rebuilt: its owner's methods, run after their transition is on disk instead of
 * the machine's own implementations. A machine shared by many actors then needs no way back
 * from an effect to the object it is for.
 */
export type ActorEffects = Readonly<Record<string, () => void>>;

interface ExecutableAction {
  type: string;
  params?: unknown;
  info?: unknown;
  exec?: ((info: unknown, params: unknown) => void) | undefined;
}

const raiseAction = 'xstate.raise';
const cancelAction = 'xstate.cancel';

/**
 * An actor: one XState machine driven by XState's pure `transition`, with the I/O around it.
 * Every event is appended to the event log first; the machine's actions (its effects, and its
 * delayed events as timers on the injected clock) run only after that append is durable. That
 * ordering is what lets a crashed gateway rebuild every actor from its log (`rehydrate`). Typed
 * by its machine, as XState's `transition` is: it takes only the events the machine knows.
 */
export class ActorCell<M extends AnyStateMachine> {
  private snapshot: AnyMachineSnapshot;
  private readonly timers = new Map<string, unknown>();
  private stopped = false;
  /** Called after each transition, synchronously, in the same tick as its append. */
  onTransition: ((transition: Transition) => void) | undefined;

  private constructor(
    readonly machine: M,
    readonly identity: ActorIdentity,
    private readonly deps: RuntimeDeps,
    snapshot: AnyMachineSnapshot,
    private readonly effects: ActorEffects | undefined,
  ) {
    this.snapshot = snapshot;
  }

  /** Creates a new actor: logs its creation (with its input) and runs its entry effects. */
  static create<M extends AnyStateMachine>(
    machine: M,
    input: InputFrom<M>,
    identity: ActorIdentity,
    deps: RuntimeDeps,
    effects?: ActorEffects,
  ): ActorCell<M> {
    const [snapshot, actions] = pureInitialTransition(machine, input);
    const cell = new ActorCell(machine, identity, deps, snapshot, effects);
    cell.record(initEvent, input as Record<string, unknown>, null);
    cell.runAfterCommit(actions as ExecutableAction[]);
    return cell;
  }

  /**
   * Rebuilds an actor from its recorded events without running anything, then sends it
   * `actor.rehydrated` so that each machine re-arms its timers and resumes its effects. Throws
   * for a log that does not fold: one not starting with the creation, or with a row the
   * machine's schemas refuse (see foldEvents).
   */
  static rehydrate<M extends AnyStateMachine>(
    machine: M,
    rows: readonly EventRow[],
    identity: ActorIdentity,
    deps: RuntimeDeps,
    effects?: ActorEffects,
  ): ActorCell<M> {
    return new ActorCell(machine, identity, deps, foldEvents(identity.kind, machine, rows), effects);
  }

  get state(): string {
    return stateName(this.snapshot.value);
  }

  get context(): ContextFrom<M> {
    return this.snapshot.context;
  }

  /** Stopped in memory (gateway shutdown): it takes no more events. */
  get isStopped(): boolean {
    return this.stopped;
  }

  get done(): boolean {
    return this.snapshot.status === 'done';
  }

  /** Whether the current state would take this event (XState's `can`, without running it). */
  can(event: EventFromLogic<M>): boolean {
    return this.snapshot.can(event);
  }

  /**
   * Processes one event: transition, append, then effects after commit. Ignored once done, and
   * when the current state does not take it (both logged at debug).
   */
  send(event: EventFromLogic<M>): void {
    this.take(event);
  }

  /** `send`, and the machine's own raised and delayed events (which its event type does not name). */
  private take(event: EventObject): void {
    if (this.stopped || this.done) {
      this.ignore(event, 'event for a finished actor ignored');
      return;
    }
    const from = this.state;
    const [next, actions] = pureTransition(this.machine, this.snapshot, event);
    // XState hands back the same snapshot for an event no state takes, and also for a
    // re-entry into the same state (which still has actions, e.g. re-armed timers).
    if (next === this.snapshot && actions.length === 0) {
      this.ignore(event, 'event not taken in this state: ignored');
      return;
    }
    this.snapshot = next;
    const { type, ...data } = event;
    this.record(type, Object.keys(data).length > 0 ? data : null, from);
    this.runAfterCommit(actions as ExecutableAction[]);
    if (this.done) this.clearTimers();
  }

  private ignore(event: EventObject, why: string): void {
    const { traceId, kind, id } = this.identity;
    this.deps.logger.debug({ traceId, actor: kind, id, event: event.type, state: this.state }, why);
  }

  /**
   * Stops the actor in memory (gateway shutdown): no more events, effects or timers. Its log
   * stays as it is, to be rehydrated at the next start.
   */
  stop(): void {
    this.stopped = true;
    this.clearTimers();
  }

  private clearTimers(): void {
    for (const handle of this.timers.values()) this.deps.clock.clearTimeout(handle);
    this.timers.clear();
  }

  private record(event: string, data: Record<string, unknown> | null, from: string | null): void {
    const { kind, id, traceId, msgId, owner } = this.identity;
    const to = this.state;
    const row: EventRow = {
      hlc: this.deps.hlc.tick(),
      host: this.deps.host,
      actorKind: kind,
      actorId: id,
      traceId,
      msgId,
      event,
      fromState: from,
      toState: to,
      data,
    };
    appendEvent(this.deps.store, row, { owner: owner ?? null, done: this.done });
    this.deps.logger.debug({ traceId, actor: kind, id, msgId, event, from, to }, 'transition');
    this.onTransition?.({ event, from, to, done: this.done, data });
  }

  private runAfterCommit(actions: ExecutableAction[]): void {
    if (actions.length === 0) return;
    this.deps.store.batch.afterCommit(() => {
      for (const action of actions) this.runAction(action);
    });
  }

  private runAction(action: ExecutableAction): void {
    if (this.stopped) return;
    if (action.type === raiseAction) {
      const params = action.params as { event: EventObject; id?: string; delay?: number };
      if (this.done) return;
      if (params.delay === undefined) {
        this.take(params.event);
        return;
      }
      const id = params.id ?? params.event.type;
      const previous = this.timers.get(id);
      if (previous !== undefined) this.deps.clock.clearTimeout(previous);
      const handle = this.deps.clock.setTimeout(() => {
        this.timers.delete(id);
        this.take(params.event);
      }, params.delay);
      this.timers.set(id, handle);
      return;
    }
    if (action.type === cancelAction) {
      const { sendId } = action.params as { sendId: string };
      const handle = this.timers.get(sendId);
      if (handle !== undefined) this.deps.clock.clearTimeout(handle);
      this.timers.delete(sendId);
      return;
    }
    try {
      const own = this.effects?.[action.type];
      if (own) own();
      else action.exec?.(action.info, action.params);
    } catch (err) {
      this.deps.logger.error(
        {
          err,
          traceId: this.identity.traceId,
          actor: this.identity.kind,
          id: this.identity.id,
          action: action.type,
        },
        'effect failed',
      );
    }
  }
}
