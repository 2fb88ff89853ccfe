import type { AnyMachineSnapshot } from 'xstate';
import { initEvent, parseRecordedEvent } from '../kernel/parseRecordedEvent.js';
import { pureInitialTransition, pureTransition } from '../kernel/pureTransition.js';
import { stateName } from '../kernel/stateName.js';
import { type ActorKind, machines } from '../machines/index.js';
import type { ReplayEvent } from './replayEvent.js';

/** Why a recorded actor and the current machine definition part ways. */
export const DivergenceKind = {
  /** The machine computes another state than the one recorded. */
  stateMismatch: 'state-mismatch',
  /** An event before the actor's creation (`xstate.init`), or a second creation. */
  missingInit: 'missing-init',
  /** Events of an actor kind no machine defines. */
  unknownKind: 'unknown-kind',
  /** The machine refuses the recorded input or event (it throws). */
  rejected: 'rejected',
  /** The recorded input or event does not fit the machine's schema: no machine would take it. */
  invalidEvent: 'invalid-event',
} as const;
export type DivergenceKind = (typeof DivergenceKind)[keyof typeof DivergenceKind];

export interface Divergence {
  kind: DivergenceKind;
  actorKind: string;
  actorId: string;
  host: string;
  /** The event where they part: its position in its host's log, name and clock time. */
  seq: number;
  event: string;
  hlc: string;
  recorded: { from: string | null; to: string };
  /** What the current definition computes (null when it cannot say). */
  computed: string | null;
  detail: string;
}

/** The mark of an actor already reported: checked no further. */
const parted = Symbol('parted');
type Slot = AnyMachineSnapshot | typeof parted;

/**
 * Re-runs each actor's recorded events through the current machine definitions with XState's
 * pure transition (no effect runs, no timer starts) and reports where a recorded transition and
 * the recomputed one differ: the first such event per actor (after it the actor's recorded
 * states no longer mean what the machine says). Memory: one snapshot per live actor; an actor
 * that reaches a final state is forgotten.
 */
export class Rerun {
  /**
   * Per host, per actor kind, by actor id: the actor's snapshot, or `parted` once reported.
   * Nested maps rather than one map by a joined key: no key string to build per event.
   */
  private readonly actors = new Map<string, Map<string, Map<string, Slot>>>();
  private live = 0;
  checked = 0;

  /** Checks one event (in timeline order); returns the divergence it shows, if any. */
  check(row: ReplayEvent): Divergence | undefined {
    const actors = this.actorsOf(row.host, row.actorKind);
    const previous = actors.get(row.actorId);
    if (previous === parted) return undefined;
    this.checked++;
    if (!Object.hasOwn(machines, row.actorKind))
      return this.part(actors, row, DivergenceKind.unknownKind, null, `no machine is named ${row.actorKind}`);
    const kind = row.actorKind as ActorKind;
    const { machine } = machines[kind];
    if (row.event === initEvent && previous) {
      return this.part(actors, row, DivergenceKind.missingInit, null, 'created twice');
    }
    if (row.event !== initEvent && !previous) {
      return this.part(actors, row, DivergenceKind.missingInit, null, `no ${initEvent} before this event`);
    }
    const parsed = parseRecordedEvent(kind, row);
    if (!parsed.ok) {
      // The machine takes no transition on an event it has no name for: where the log records
      // one to another state, that is the first thing that parts.
      const stays = parsed.unknownType && previous ? stateName(previous.value) : null;
      if (stays !== null && stays !== row.toState) {
        return this.part(actors, row, DivergenceKind.stateMismatch, stays, mismatch(row, stays));
      }
      return this.part(
        actors,
        row,
        DivergenceKind.invalidEvent,
        stays,
        `the recorded event ${parsed.problem}`,
      );
    }
    const { event } = parsed;
    let next: AnyMachineSnapshot;
    try {
      [next] =
        event.type === initEvent
          ? pureInitialTransition(machine, event.input)
          : pureTransition(machine, previous as AnyMachineSnapshot, event);
    } catch (err) {
      return this.part(actors, row, DivergenceKind.rejected, null, (err as Error).message);
    }
    const computed = stateName(next.value);
    if (computed !== row.toState) {
      return this.part(actors, row, DivergenceKind.stateMismatch, computed, mismatch(row, computed));
    }
    if (next.status === 'done') {
      if (previous) {
        actors.delete(row.actorId);
        this.live--;
      }
    } else {
      if (!previous) this.live++;
      actors.set(row.actorId, next);
    }
    return undefined;
  }

  /** Actors with a snapshot held (those not yet in a final state). */
  get liveActors(): number {
    return this.live;
  }

  private actorsOf(host: string, kind: string): Map<string, Slot> {
    let byKind = this.actors.get(host);
    if (!byKind) {
      byKind = new Map();
      this.actors.set(host, byKind);
    }
    let byId = byKind.get(kind);
    if (!byId) {
      byId = new Map();
      byKind.set(kind, byId);
    }
    return byId;
  }

  private part(
    actors: Map<string, Slot>,
    row: ReplayEvent,
    kind: DivergenceKind,
    computed: string | null,
    detail: string,
  ): Divergence {
    const slot = actors.get(row.actorId);
    if (slot !== undefined && slot !== parted) this.live--;
    actors.set(row.actorId, parted);
    return {
      kind,
      actorKind: row.actorKind,
      actorId: row.actorId,
      host: row.host,
      seq: row.seq,
      event: row.event,
      hlc: row.hlc,
      recorded: { from: row.fromState, to: row.toState },
      computed,
      detail,
    };
  }
}

function mismatch(row: ReplayEvent, computed: string): string {
  return `recorded ${row.fromState ?? '∅'} → ${row.toState}, the ${row.actorKind} machine computes ${computed}`;
}
