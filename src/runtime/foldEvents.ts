import type { AnyMachineSnapshot, AnyStateMachine } from 'xstate';
import type { EventRow } from '../store/eventRow.js';
import { pureInitialTransition, pureTransition } from './pureTransition.js';
import { stateName } from './stateName.js';

/** The name of the first event of every actor: its creation, with its input as data. */
export const initEvent = 'xstate.init';

/** Turns a stored row back into the event the machine received. */
export function eventOfRow(row: EventRow): { type: string } & Record<string, unknown> {
  return { ...(row.data ?? {}), type: row.event };
}

export interface FoldStep {
  row: EventRow;
  /** The state the current machine definition computes for this row. */
  computed: string;
}

/**
 * Folds an actor's recorded events through a machine with XState's pure transition (see
 * pureTransition.ts): no action runs, no timer starts. Rehydration and replay both stand on this.
 */
export function foldEvents(
  machine: AnyStateMachine,
  rows: readonly EventRow[],
  onStep?: (step: FoldStep) => void,
): AnyMachineSnapshot {
  const [first, ...rest] = rows;
  if (!first || first.event !== initEvent) {
    throw new Error(`an actor's log must start with ${initEvent}; found ${first?.event ?? 'nothing'}`);
  }
  let [snapshot] = pureInitialTransition(machine, first.data ?? {});
  onStep?.({ row: first, computed: stateName(snapshot.value) });
  for (const row of rest) {
    [snapshot] = pureTransition(machine, snapshot, eventOfRow(row));
    onStep?.({ row, computed: stateName(snapshot.value) });
  }
  return snapshot;
}
