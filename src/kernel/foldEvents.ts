import type { AnyMachineSnapshot, AnyStateMachine } from 'xstate';
import { BridgeError, ErrorCode } from '../errors.js';
import type { ActorKind } from '../machines/index.js';
import type { EventRow } from '../store/eventRow.js';
import { initEvent, parseRecordedEvent, type RecordedEvent } from './parseRecordedEvent.js';
import { pureInitialTransition, pureTransition } from './pureTransition.js';

/**
 * Folds an actor's recorded events through its machine with XState's pure transition (see
 * pureTransition.ts): no action runs, no timer starts. Each row is parsed with the machine's
 * schemas first; one that does not parse stops the fold with an error naming the actor and the
 * event, for rehydration to report (resumeOrReport).
 */
export function foldEvents(
  kind: ActorKind,
  machine: AnyStateMachine,
  rows: readonly EventRow[],
): AnyMachineSnapshot {
  let snapshot: AnyMachineSnapshot | undefined;
  for (const row of rows) {
    const event = recorded(kind, row);
    if (event.type === initEvent) {
      if (snapshot) throw unfolded(kind, row, 'creates the actor a second time');
      [snapshot] = pureInitialTransition(machine, event.input);
    } else if (snapshot) {
      [snapshot] = pureTransition(machine, snapshot, event);
    } else {
      throw mustStartWithInit(row.event);
    }
  }
  if (!snapshot) throw mustStartWithInit('nothing');
  return snapshot;
}

function recorded(kind: ActorKind, row: EventRow): RecordedEvent<ActorKind> {
  const parsed = parseRecordedEvent(kind, row);
  if (!parsed.ok) throw unfolded(kind, row, parsed.problem);
  return parsed.event;
}

function unfolded(kind: ActorKind, row: EventRow, problem: string): BridgeError {
  const at = row.seq === undefined ? '' : ` (events row seq=${row.seq})`;
  return new BridgeError(
    ErrorCode.badStore,
    `the ${kind} actor ${row.actorId} does not fold into its machine: its recorded event ${row.event}${at} ${problem}`,
  );
}

function mustStartWithInit(found: string): Error {
  return new Error(`an actor's log must start with ${initEvent}; found ${found}`);
}
