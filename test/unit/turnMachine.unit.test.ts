import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import { z } from 'zod';
import { type TurnEvent, type TurnInput, turnMachine } from '../../src/machines/turnMachine.js';
import {
  allStateIds,
  createMachineCoverage,
  unreachedStateIds,
  unsampledEventTypes,
} from '../support/machineCoverage.js';
import { sampleTurnInput } from '../support/sampleInputs.js';

type Snapshot = SnapshotFrom<typeof turnMachine>;
type Actions = ExecutableActionsFrom<typeof turnMachine>[];

const input = sampleTurnInput;
const ttl = input.deadline - input.startedAt;

// The id XState gives the delayed event of `after` in waiting.
const deadlineTimer = 'xstate.after.untilDeadline.turn.waiting';

// Every step records the (state, transition) pair it took; the last test compares that with the
// graph (test/support/machineCoverage.ts).
const coverage = createMachineCoverage(turnMachine);
const step = (snapshot: Snapshot, event: TurnEvent): [Snapshot, Actions] => coverage.step(snapshot, event);

// Actions as readable strings: effects by name, timers as `raise <event> after <ms>`.
const raiseParams = z.object({ event: z.object({ type: z.string() }), delay: z.number().optional() });
const cancelParams = z.object({ sendId: z.string() });

function effects(actions: ReadonlyArray<{ type: string; params: unknown }>): string[] {
  return actions.map((action) => {
    if (action.type === 'xstate.raise') {
      const { event, delay } = raiseParams.parse(action.params);
      return `raise ${event.type} after ${delay}`;
    }
    if (action.type === 'xstate.cancel') return `cancel ${cancelParams.parse(action.params).sendId}`;
    return action.type;
  });
}

/** Fires the delayed event the given actions armed, as the runtime's timer would. */
function fire(snapshot: Snapshot, actions: Actions, timer: string): [Snapshot, Actions] {
  const raised = actions
    .filter((action) => action.type === 'xstate.raise')
    .map((action) => raiseParams.parse(action.params).event.type);
  expect(raised).toContain(timer);
  // XState names delayed events itself; the machine's event union does not list them.
  return step(snapshot, { type: timer } as TurnEvent);
}

function start(overrides: Partial<TurnInput> = {}): [Snapshot, Actions] {
  return initialTransition(turnMachine, { ...input, ...overrides });
}

const answered = (answerMsgId = 'msg-answer-1'): TurnEvent => ({ type: 'turn.answered', answerMsgId });
const abandoned = (why = 'caller hung up'): TurnEvent => ({ type: 'turn.abandoned', why });
const rehydrated: TurnEvent = { type: 'actor.rehydrated' };

const waiting = (): Snapshot => start()[0];
/** The context a turn starts with: its input, no outcome yet. */
const initial = { ...input, answerMsgId: null, why: null };

describe('turnMachine: initial state', () => {
  it('starts waiting with the input as context and arms the deadline timer (deadline - startedAt)', () => {
    const [snapshot, actions] = start();
    expect(snapshot.value).toBe('waiting');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual(initial);
    expect(effects(actions)).toEqual([`raise ${deadlineTimer} after ${ttl}`]);
  });

  it('never arms a negative timer when the deadline is already past', () => {
    const [, actions] = start({ deadline: input.startedAt - 5 });
    expect(effects(actions)).toEqual([`raise ${deadlineTimer} after 0`]);
  });
});

describe('turnMachine: waiting', () => {
  it('turn.answered → answered (final): cancels the deadline timer and settles the caller', () => {
    const [snapshot, actions] = step(waiting(), answered());
    expect(snapshot.value).toBe('answered');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual({ ...initial, answerMsgId: 'msg-answer-1' });
    expect(effects(actions)).toEqual([`cancel ${deadlineTimer}`, 'settleCaller']);
  });

  it('turn.abandoned → abandoned (final): cancels the deadline timer and settles the caller', () => {
    const [snapshot, actions] = step(waiting(), abandoned());
    expect(snapshot.value).toBe('abandoned');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual({ ...initial, why: 'caller hung up' });
    expect(effects(actions)).toEqual([`cancel ${deadlineTimer}`, 'settleCaller']);
  });

  it('the deadline timer → expired (final): settles the caller', () => {
    const [before, armed] = start();
    const [snapshot, actions] = fire(before, armed, deadlineTimer);
    expect(snapshot.value).toBe('expired');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual(initial);
    // Leaving waiting cancels its (already fired) timer; harmless, the runtime forgets it.
    expect(effects(actions)).toEqual([`cancel ${deadlineTimer}`, 'settleCaller']);
  });

  it('settleCaller sees the event that ended the turn (answer id, why), and the context keeps it', () => {
    const answer = answered('msg-answer-9');
    const [, answerActions] = step(waiting(), answer);
    expect(answerActions.find((action) => action.type === 'settleCaller')?.info.event).toEqual(answer);
    const gone = abandoned('gateway restarted');
    const [, goneActions] = step(waiting(), gone);
    expect(goneActions.find((action) => action.type === 'settleCaller')?.info.event).toEqual(gone);
  });

  it('actor.rehydrated → waiting again: re-arms the deadline timer, context unchanged', () => {
    const [snapshot, actions] = step(waiting(), rehydrated);
    expect(snapshot.value).toBe('waiting');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual(initial);
    expect(effects(actions)).toEqual([`cancel ${deadlineTimer}`, `raise ${deadlineTimer} after ${ttl}`]);
  });

  it('actor.rehydrated re-arms with the delay the runtime provides (time left, not the full TTL)', () => {
    const now = 21_000;
    const wallClock = turnMachine.provide({
      delays: { untilDeadline: ({ context }) => Math.max(0, context.deadline - now) },
    });
    const [before] = initialTransition(wallClock, input);
    const [snapshot, actions] = transition(wallClock, before, rehydrated);
    expect(snapshot.value).toBe('waiting');
    expect(effects(actions)).toEqual([`cancel ${deadlineTimer}`, `raise ${deadlineTimer} after 10000`]);
  });

  it('the timer re-armed by a rehydration still expires the turn', () => {
    const [rehydratedWaiting, armed] = step(waiting(), rehydrated);
    const [snapshot, actions] = fire(rehydratedWaiting, armed, deadlineTimer);
    expect(snapshot.value).toBe('expired');
    expect(effects(actions)).toEqual([`cancel ${deadlineTimer}`, 'settleCaller']);
  });
});

/** One of every event the machine knows, with a payload, plus the delayed one. */
const sampleEvents: TurnEvent[] = [
  answered(),
  abandoned(),
  rehydrated,
  ...[deadlineTimer].map((type) => ({ type }) as TurnEvent),
];

describe('turnMachine: final states', () => {
  const finals = {
    answered: () => step(waiting(), answered())[0],
    expired: () => {
      const [before, armed] = start();
      return fire(before, armed, deadlineTimer)[0];
    },
    abandoned: () => step(waiting(), abandoned())[0],
  };
  const finalStates = Object.keys(finals) as Array<keyof typeof finals>;

  it.each(finalStates)(
    '%s ignores every event: a late answer or a restart does not settle the caller again',
    (state) => {
      const before = finals[state]();
      expect(before.value).toBe(state);
      expect(before.status).toBe('done');
      for (const event of sampleEvents) {
        const [after, actions] = transition(turnMachine, before, event);
        expect(after, event.type).toBe(before);
        expect(actions, event.type).toEqual([]);
      }
    },
  );
});

describe('turnMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    expect(unsampledEventTypes(turnMachine, sampleEvents)).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    expect(allStateIds(turnMachine)).toEqual([
      'turn.abandoned',
      'turn.answered',
      'turn.expired',
      'turn.waiting',
    ]);
    expect(unreachedStateIds(turnMachine, { input, events: sampleEvents })).toEqual([]);
  });

  it('every state but waiting is final', () => {
    const finals = allStateIds(turnMachine).filter((id) => turnMachine.getStateNodeById(id).type === 'final');
    expect(finals).toEqual(['turn.abandoned', 'turn.answered', 'turn.expired']);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    expect(coverage.declaredCount()).toBe(4);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
