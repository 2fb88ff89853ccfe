import type { Config } from '../config/schema.js';
import { ActorCell, type ActorEffects, type RuntimeDeps } from '../kernel/ActorCell.js';
import type { Clock } from '../kernel/clock.js';
import type { ActorKind } from '../machines/index.js';
import { remindMachine } from '../machines/remindMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import type { PaneInjector } from '../panes/paneInjector.js';
import { typeAndSubmit } from '../panes/typeAndSubmit.js';
import { remindActorId } from '../store/actorIds.js';
import { readActorEvents } from '../store/readEvents.js';

export const remindKind: ActorKind = 'remind';

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

/** What a reminder needs from the gateway. */
export interface ReminderDeps extends RuntimeDeps {
  config: Pick<Config, 'remind'>;
  metrics: Metrics;
  /** A nudge went out (besides the pane, interfaces pass it on: MCP notifications). */
  onNudge?: ((nudge: Nudge) => void) | undefined;
  /** The gateway's one remind machine for all its entities (createRemindMachine). */
  machines: { readonly remind: typeof remindMachine };
}

/** What a nudge needs from the entity it reminds. */
export interface ReminderOwner {
  readonly gid: string;
  readonly name: string;
  /** The oldest message held for a drain: when it came, and from whom (`name@host`). */
  oldestHeld(): { acceptedAt: number; from: string } | undefined;
  /** The entity's pane, if it has one that can take input now. */
  readyPane(): PaneInjector | undefined;
}

type RemindCell = ActorCell<typeof remindMachine>;

/**
 * The remind machine with one gateway's clock, made once per gateway and shared by all its
 * entities; its one effect, the nudge, is each reminder's own (given to its actor in `open`).
 */
export function createRemindMachine(clock: Clock): typeof remindMachine {
  return remindMachine.provide({
    delays: { untilDue: ({ context }) => Math.max(0, context.dueAt - clock.now()) },
  });
}

/**
 * The reminders of one entity that pulls its messages (U3): a round starts when messages are
 * held for it and ends when none are, or when a drain answers it. What it learns of the
 * entity's messages is one number, the held count (`heldChanged`): it does not know how
 * messages get held, or which ones.
 */
export class Reminder {
  private held = 0;
  private syncScheduled = false;
  private stopped = false;

  private readonly cell: RemindCell;

  /** `open` creates or rebuilds its actor, given the reminder's nudge as its one effect. */
  private constructor(
    open: (effects: ActorEffects) => RemindCell,
    private readonly owner: ReminderOwner,
    private readonly deps: ReminderDeps,
  ) {
    // The nudge runs after its transition is on disk, by when this reminder is built.
    this.cell = open({ nudge: () => queueMicrotask(() => this.nudge()) });
  }

  /** The entity's reminder: rebuilt from the log, or new. */
  static open(owner: ReminderOwner, deps: ReminderDeps): Reminder {
    const machine = deps.machines.remind;
    const id = remindActorId(owner.gid);
    const identity = { kind: remindKind, id, traceId: owner.gid, msgId: null, owner: owner.gid };
    const rows = readActorEvents(deps.store, remindKind, id);
    if (rows.length > 0) {
      const reminder = new Reminder(
        (effects) => ActorCell.rehydrate(machine, rows, identity, deps, effects),
        owner,
        deps,
      );
      reminder.cell.send({ type: 'actor.rehydrated' });
      return reminder;
    }
    const { firstMs, maxMs } = deps.config.remind;
    const input = { entity: owner.gid, firstMs, maxMs };
    return new Reminder((effects) => ActorCell.create(machine, input, identity, deps, effects), owner, deps);
  }

  /** How many messages are held for a drain now. */
  heldChanged(count: number): void {
    this.held = count;
    this.scheduleSync();
  }

  /** A drain answers the reminder: quiet now, and a new round if messages are still held. */
  drained(): void {
    if (this.cell.state === 'quiet') return;
    this.cell.send({ type: 'remind.drained', at: this.deps.clock.now() });
    this.scheduleSync();
  }

  /** The entity was deregistered: nothing more to remind. */
  end(): void {
    this.cell.send({ type: 'remind.ended' });
  }

  stop(): void {
    this.stopped = true;
    this.cell.stop();
  }

  /** Reminds the entity that messages wait: its pane (when it can take input), and listeners. */
  nudge(): void {
    if (this.stopped || this.cell.state !== 'nudging') return;
    const oldest = this.owner.oldestHeld();
    const now = this.deps.clock.now();
    // Nothing waits after all (e.g. drained while reminders were off): end the round rather
    // than log a silent nudge every maxMs forever.
    if (!oldest) {
      this.cell.send({ type: 'remind.drained', at: now });
      return;
    }
    if (this.held > 0) this.sendNudge(oldest, now);
    this.cell.send({ type: 'remind.nudged', at: now });
  }

  private sendNudge(oldest: { acceptedAt: number; from: string }, now: number): void {
    const { held, owner } = this;
    const ago = Math.max(0, Math.round((now - oldest.acceptedAt) / 1000));
    const s = held === 1 ? '' : 's';
    const text =
      `[bridge NUDGE] ${held} message${s} waiting for you (oldest from ${oldest.from}, ${ago} s ago): ` +
      'call bridge_drain';
    const nudge: Nudge = {
      entity: owner.gid,
      name: owner.name,
      waiting: held,
      oldestAt: oldest.acceptedAt,
      oldestFrom: oldest.from,
      text,
    };
    this.deps.metrics.nudges.inc();
    this.deps.logger.info(
      { entity: owner.name, waiting: held, nudges: this.cell.context.nudges + 1 },
      'nudged: messages wait for a drain',
    );
    const pane = owner.readyPane();
    if (pane) {
      const entity = owner.name;
      typeAndSubmit(pane, { text, marker: `NUDGE ${now}` }).then(
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

  /**
   * Brings the round in line with the held count once the current tick is done, so a message
   * that is held and handed over in the same tick (a reply to an open send, an answer) starts
   * no round and writes no rows.
   */
  private scheduleSync(): void {
    if (this.syncScheduled) return;
    this.syncScheduled = true;
    queueMicrotask(() => {
      this.syncScheduled = false;
      if (this.cell.done) return;
      const at = this.deps.clock.now();
      if (this.held > 0 && this.cell.state === 'quiet') {
        // A new round, with the intervals configured now.
        const { firstMs, maxMs } = this.deps.config.remind;
        this.cell.send({ type: 'remind.held', at, count: this.held, firstMs, maxMs });
      } else if (this.held === 0 && this.cell.state !== 'quiet') {
        this.cell.send({ type: 'remind.drained', at });
      }
    });
  }
}
