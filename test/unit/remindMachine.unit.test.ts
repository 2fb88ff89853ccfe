import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import { z } from 'zod';
import { stateName } from '../../src/kernel/stateName.js';
import {
  type RemindEvent,
  type RemindInput,
  remindInterval,
  remindMachine,
} from '../../src/machines/remindMachine.js';
import {
  allStateIds,
  createMachineCoverage,
  unreachedStateIds,
  unsampledEventTypes,
} from '../support/machineCoverage.js';

type Snapshot = SnapshotFrom<typeof remindMachine>;
type Actions = ExecutableActionsFrom<typeof remindMachine>[];

const input: RemindInput = { entity: 'worker-gid', firstMs: 1_000, maxMs: 8_000 };
const initialContext = { ...input, nudges: 0, dueAt: 0, lastAt: 0 };

// The id XState gives the delayed event of `after` in waiting.
const dueTimer = 'xstate.after.untilDue.remind.waiting';

// Every step records the (state, transition) pair it took; the last test compares that with the
// graph (test/support/machineCoverage.ts).
const coverage = createMachineCoverage(remindMachine);
const step = (snapshot: Snapshot, event: RemindEvent): [Snapshot, Actions] => coverage.step(snapshot, event);

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
  return step(snapshot, { type: timer } as RemindEvent);
}

function run(snapshot: Snapshot, ...events: RemindEvent[]): Snapshot {
  let current = snapshot;
  for (const event of events) [current] = step(current, event);
  return current;
}

const held = (at = 10_000, count = 1): RemindEvent => ({ type: 'remind.held', at, count });
const nudged = (at: number): RemindEvent => ({ type: 'remind.nudged', at });
const drained = (at: number): RemindEvent => ({ type: 'remind.drained', at });
const ended: RemindEvent = { type: 'remind.ended' };
const rehydrated: RemindEvent = { type: 'actor.rehydrated' };
/** A delayed event by its id: XState names them itself, the machine's event union does not list them. */
const delayed = (type: string): RemindEvent => ({ type }) as RemindEvent;
const due = delayed(dueTimer);

const quiet = (): Snapshot => initialTransition(remindMachine, input)[0];

/** How to get a fresh reminder into each non-final state. */
const reach = {
  quiet,
  waiting: () => run(quiet(), held(10_000)),
  nudging: () => run(quiet(), held(10_000), due),
} as const satisfies Record<string, () => Snapshot>;

/** The timer a state arms on entry and cancels on exit, if any. */
const timerOf: Record<keyof typeof reach, string | undefined> = {
  quiet: undefined,
  waiting: dueTimer,
  nudging: undefined,
};

describe('remindInterval', () => {
  it('the first wait of a round is firstMs', () => {
    expect(remindInterval(input, 0)).toBe(1_000);
  });

  it('doubles with every nudge sent', () => {
    expect([1, 2].map((nudges) => remindInterval(input, nudges))).toEqual([2_000, 4_000]);
  });

  it('is capped at maxMs', () => {
    expect([3, 4, 10, 100, 5_000].map((nudges) => remindInterval(input, nudges))).toEqual([
      8_000, 8_000, 8_000, 8_000, 8_000,
    ]);
  });

  it('caps the first wait too when firstMs exceeds maxMs', () => {
    expect(remindInterval({ firstMs: 5_000, maxMs: 3_000 }, 0)).toBe(3_000);
  });

  it('a cap that is not a power-of-two multiple of firstMs is reached exactly', () => {
    const context = { firstMs: 1_500, maxMs: 10_000 };
    expect([0, 1, 2, 3, 4].map((nudges) => remindInterval(context, nudges))).toEqual([
      1_500, 3_000, 6_000, 10_000, 10_000,
    ]);
  });
});

describe('remindMachine: initial state', () => {
  it('starts quiet with no nudges and no times, and arms nothing', () => {
    const [snapshot, actions] = initialTransition(remindMachine, input);
    expect(snapshot.value).toBe('quiet');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual(initialContext);
    expect(actions).toEqual([]);
  });
});

describe('remindMachine: quiet', () => {
  it('remind.held → waiting: records the time, the first nudge is due after firstMs', () => {
    const [snapshot, actions] = step(quiet(), held(10_000, 3));
    expect(snapshot.value).toBe('waiting');
    expect(snapshot.context).toEqual({ ...input, nudges: 0, lastAt: 10_000, dueAt: 11_000 });
    // The delay is the pure default dueAt - lastAt.
    expect(effects(actions)).toEqual([`raise ${dueTimer} after 1000`]);
  });

  it('remind.held starts a new round: the nudges of the last one are forgotten', () => {
    const snapshot = run(reach.nudging(), nudged(11_000), due, nudged(13_000), drained(14_000));
    expect(snapshot.value).toBe('quiet');
    expect(snapshot.context.nudges).toBe(2);
    const [next, actions] = step(snapshot, held(20_000));
    expect(next.value).toBe('waiting');
    expect(next.context).toEqual({ ...input, nudges: 0, lastAt: 20_000, dueAt: 21_000 });
    expect(effects(actions)).toEqual([`raise ${dueTimer} after 1000`]);
  });

  it('remind.held with intervals: the round uses them (config changed since the actor was made)', () => {
    const [snapshot, actions] = step(quiet(), {
      type: 'remind.held',
      at: 10_000,
      count: 1,
      firstMs: 250,
      maxMs: 4_000,
    });
    expect(snapshot.context).toEqual({
      ...input,
      firstMs: 250,
      maxMs: 4_000,
      nudges: 0,
      lastAt: 10_000,
      dueAt: 10_250,
    });
    expect(effects(actions)).toEqual([`raise ${dueTimer} after 250`]);
  });

  it.each([nudged(1), drained(1), rehydrated, due])('ignores $type', (event) => {
    const before = quiet();
    const [after, actions] = transition(remindMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('remindMachine: waiting', () => {
  it('the due timer → nudging: nudges, context unchanged', () => {
    const [waiting, armed] = step(quiet(), held(10_000));
    const [snapshot, actions] = fire(waiting, armed, dueTimer);
    expect(snapshot.value).toBe('nudging');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual(waiting.context);
    expect(effects(actions)).toEqual([`cancel ${dueTimer}`, 'nudge']);
  });

  it('remind.drained → quiet: cancels the timer, records the time, keeps the round as it was', () => {
    const [snapshot, actions] = step(reach.waiting(), drained(10_400));
    expect(snapshot.value).toBe('quiet');
    expect(snapshot.context).toEqual({ ...input, nudges: 0, lastAt: 10_400, dueAt: 11_000 });
    expect(effects(actions)).toEqual([`cancel ${dueTimer}`]);
  });

  it('actor.rehydrated → waiting again: re-arms the timer with dueAt - lastAt, context unchanged', () => {
    const before = run(reach.nudging(), nudged(12_000));
    expect(before.context).toMatchObject({ nudges: 1, lastAt: 12_000, dueAt: 14_000 });
    const [snapshot, actions] = step(before, rehydrated);
    expect(snapshot.value).toBe('waiting');
    expect(snapshot.context).toEqual(before.context);
    expect(effects(actions)).toEqual([`cancel ${dueTimer}`, `raise ${dueTimer} after 2000`]);
  });

  it('actor.rehydrated re-arms with the delay the runtime provides (time left until dueAt)', () => {
    const now = 10_750;
    const wallClock = remindMachine.provide({
      delays: { untilDue: ({ context }) => Math.max(0, context.dueAt - now) },
    });
    const [before] = transition(wallClock, initialTransition(wallClock, input)[0], held(10_000));
    const [snapshot, actions] = transition(wallClock, before, rehydrated);
    expect(snapshot.value).toBe('waiting');
    expect(effects(actions)).toEqual([`cancel ${dueTimer}`, `raise ${dueTimer} after 250`]);
  });

  // More messages held while a round runs do not restart it (nor postpone the nudge).
  it.each([held(10_500, 2), nudged(1)])('ignores $type', (event) => {
    const before = reach.waiting();
    const [after, actions] = transition(remindMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('remindMachine: nudging', () => {
  it('remind.nudged → waiting: counts the nudge, the next one is due after twice the wait', () => {
    const [snapshot, actions] = step(reach.nudging(), nudged(11_200));
    expect(snapshot.value).toBe('waiting');
    expect(snapshot.context).toEqual({ ...input, nudges: 1, lastAt: 11_200, dueAt: 13_200 });
    expect(effects(actions)).toEqual([`raise ${dueTimer} after 2000`]);
  });

  it('a round nudges at first, doubling, then capped intervals, each measured from the nudge before', () => {
    let [snapshot, actions] = step(quiet(), held(0));
    const delays: string[] = [];
    const contexts: Array<{ nudges: number; lastAt: number; dueAt: number }> = [];
    let at = 0;
    for (let round = 0; round < 5; round++) {
      delays.push(...effects(actions));
      [snapshot, actions] = fire(snapshot, actions, dueTimer);
      expect(snapshot.value).toBe('nudging');
      expect(effects(actions)).toEqual([`cancel ${dueTimer}`, 'nudge']);
      // The nudge goes out a little after it was due: the next is measured from when it went.
      at = snapshot.context.dueAt + 10;
      [snapshot, actions] = step(snapshot, nudged(at));
      const { nudges, lastAt, dueAt } = snapshot.context;
      contexts.push({ nudges, lastAt, dueAt });
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 8_000].map((ms) => `raise ${dueTimer} after ${ms}`));
    expect(contexts).toEqual([
      { nudges: 1, lastAt: 1_010, dueAt: 3_010 },
      { nudges: 2, lastAt: 3_020, dueAt: 7_020 },
      { nudges: 3, lastAt: 7_030, dueAt: 15_030 },
      { nudges: 4, lastAt: 15_040, dueAt: 23_040 },
      { nudges: 5, lastAt: 23_050, dueAt: 31_050 },
    ]);
    expect(effects(actions)).toEqual([`raise ${dueTimer} after 8000`]);
  });

  it('remind.drained → quiet: records the time, no nudge', () => {
    const [snapshot, actions] = step(reach.nudging(), drained(11_100));
    expect(snapshot.value).toBe('quiet');
    expect(snapshot.context).toEqual({ ...input, nudges: 0, lastAt: 11_100, dueAt: 11_000 });
    expect(actions).toEqual([]);
  });

  it('actor.rehydrated → nudging again: the nudge that may not have gone out is sent again', () => {
    const before = reach.nudging();
    const [snapshot, actions] = step(before, rehydrated);
    expect(snapshot.value).toBe('nudging');
    expect(snapshot.context).toEqual(before.context);
    expect(effects(actions)).toEqual(['nudge']);
  });

  it.each([held(11_500), due])('ignores $type', (event) => {
    const before = reach.nudging();
    const [after, actions] = transition(remindMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('remindMachine: remind.ended from every non-final state', () => {
  const states = Object.keys(reach) as Array<keyof typeof reach>;

  it.each(states)('%s → ended (final), keeping the context', (state) => {
    const before = reach[state]();
    expect(stateName(before.value)).toBe(state);
    const [snapshot, actions] = step(before, ended);
    expect(snapshot.value).toBe('ended');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual(before.context);
    const timer = timerOf[state];
    expect(effects(actions)).toEqual(timer ? [`cancel ${timer}`] : []);
  });
});

/** One of every event the machine knows, with a payload, plus the delayed one. */
const sampleEvents: RemindEvent[] = [held(10_000), nudged(11_000), drained(12_000), ended, rehydrated, due];

describe('remindMachine: ended', () => {
  it('ignores every event that a state declares', () => {
    const before = run(reach.waiting(), ended);
    for (const event of sampleEvents.filter((e) => e.type !== 'remind.ended')) {
      const [after, actions] = transition(remindMachine, before, event);
      expect(after, event.type).toBe(before);
      expect(actions, event.type).toEqual([]);
    }
  });

  // `remind.ended` is declared on the root, so XState's pure `transition` still takes it in the
  // final child (ActorCell refuses events once done, foldEvents does not): harmless while
  // `ended` has no entry action.
  it('stays ended on a second remind.ended, running nothing', () => {
    const before = run(reach.nudging(), ended);
    const [after, actions] = transition(remindMachine, before, ended);
    expect(after.value).toBe('ended');
    expect(after.status).toBe('done');
    expect(after.context).toEqual(before.context);
    expect(actions).toEqual([]);
  });
});

describe('remindMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    expect(unsampledEventTypes(remindMachine, sampleEvents)).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    expect(allStateIds(remindMachine)).toEqual([
      'remind.ended',
      'remind.nudging',
      'remind.quiet',
      'remind.waiting',
    ]);
    expect(
      unreachedStateIds(remindMachine, {
        input,
        events: sampleEvents,
        // nudges grows with every loop through nudging: stop after a couple.
        stopWhen: (snapshot) => snapshot.context.nudges > 2,
      }),
    ).toEqual([]);
  });

  it('only ended is final', () => {
    const finals = allStateIds(remindMachine).filter(
      (id) => remindMachine.getStateNodeById(id).type === 'final',
    );
    expect(finals).toEqual(['remind.ended']);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    expect(coverage.declaredCount()).toBe(10);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
