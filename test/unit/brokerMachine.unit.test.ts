import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import { z } from 'zod';
import { stateName } from '../../src/kernel/stateName.js';
import { type BrokerEvent, type BrokerInput, brokerMachine } from '../../src/machines/brokerMachine.js';
import {
  allStateIds,
  createMachineCoverage,
  unreachedStateIds,
  unsampledEventTypes,
} from '../support/machineCoverage.js';

type Snapshot = SnapshotFrom<typeof brokerMachine>;
type Actions = ExecutableActionsFrom<typeof brokerMachine>[];

const input: BrokerInput = { hostId: 'host-a', retryBaseMs: 100, retryMaxMs: 1_000 };

// The id XState gives the delayed event of `backoff`'s `after`.
const retryTimer = 'xstate.after.retryDelay.broker.backoff';

// Coverage of declared transitions (test/support/machineCoverage.ts): every step records the
// (state, transition) pair it took; the last test compares that with the graph.
const coverage = createMachineCoverage(brokerMachine);
const step = (snapshot: Snapshot, event: BrokerEvent): [Snapshot, Actions] => coverage.step(snapshot, event);

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
function fire(snapshot: Snapshot, actions: Actions): [Snapshot, Actions] {
  const raised = actions
    .filter((action) => action.type === 'xstate.raise')
    .map((action) => raiseParams.parse(action.params).event.type);
  expect(raised).toEqual([retryTimer]);
  // XState names delayed events itself; the machine's event union does not list them.
  return step(snapshot, { type: retryTimer } as unknown as BrokerEvent);
}

function start(overrides: Partial<BrokerInput> = {}): [Snapshot, Actions] {
  return initialTransition(brokerMachine, { ...input, ...overrides });
}

function run(snapshot: Snapshot, ...events: BrokerEvent[]): Snapshot {
  let current = snapshot;
  for (const event of events) [current] = step(current, event);
  return current;
}

const connect: BrokerEvent = { type: 'broker.connect' };
const connected: BrokerEvent = { type: 'broker.connected' };
const lost = (error = 'ECONNREFUSED 127.0.0.1:5672'): BrokerEvent => ({ type: 'broker.lost', error });
const blocked = (reason = 'low on disk'): BrokerEvent => ({ type: 'broker.blocked', reason });
const unblocked: BrokerEvent = { type: 'broker.unblocked' };
const stop: BrokerEvent = { type: 'broker.stop' };

/** How to get a fresh broker into each non-final state. */
const reach = {
  idle: () => start()[0],
  connecting: () => run(start()[0], connect),
  connected: () => run(start()[0], connect, connected),
  blocked: () => run(start()[0], connect, connected, blocked()),
  backoff: () => run(start()[0], connect, lost()),
} as const satisfies Record<string, () => Snapshot>;

/** One of every event the machine knows, with a payload, plus the delayed one. */
const sampleEvents: BrokerEvent[] = [
  connect,
  connected,
  lost(),
  blocked(),
  unblocked,
  stop,
  { type: retryTimer } as unknown as BrokerEvent,
];

describe('brokerMachine: initial state', () => {
  it('starts idle with the input as context, no attempts, no error and no effect', () => {
    const [snapshot, actions] = start();
    expect(snapshot.value).toBe('idle');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...input, attempts: 0, lastError: null, node: null, retryInMs: null });
    expect(actions).toEqual([]);
  });
});

describe('brokerMachine: idle', () => {
  it('broker.connect → connecting: opens the connection', () => {
    const [snapshot, actions] = step(reach.idle(), connect);
    expect(snapshot.value).toBe('connecting');
    expect(snapshot.context.attempts).toBe(0);
    expect(effects(actions)).toEqual(['openConnection']);
  });

  it.each([connected, lost(), blocked(), unblocked])('ignores $type', (event) => {
    const before = reach.idle();
    const [after, actions] = transition(brokerMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('brokerMachine: connecting', () => {
  it('broker.connected → connected: resets attempts and error, opens nothing more', () => {
    const [snapshot, actions] = step(reach.connecting(), connected);
    expect(snapshot.value).toBe('connected');
    expect(snapshot.context).toEqual({ ...input, attempts: 0, lastError: null, node: null, retryInMs: null });
    expect(actions).toEqual([]);
  });

  it('broker.lost → backoff: counts the attempt, keeps the error, arms the retry after retryBaseMs', () => {
    const [snapshot, actions] = step(reach.connecting(), lost('ECONNREFUSED'));
    expect(snapshot.value).toBe('backoff');
    expect(snapshot.context.attempts).toBe(1);
    expect(snapshot.context.lastError).toBe('ECONNREFUSED');
    expect(effects(actions)).toEqual([`raise ${retryTimer} after ${input.retryBaseMs}`]);
  });

  it('several nodes (R-TOP3): the retry waits as long as the loss says, and connected names the node', () => {
    // The broker actor tells when the next node is free: at once (0) while one is.
    let [snapshot, actions] = step(reach.connecting(), {
      type: 'broker.lost',
      error: 'n1 down',
      retryInMs: 0,
    });
    expect(effects(actions)).toEqual([`raise ${retryTimer} after 0`]);
    [snapshot] = fire(snapshot, actions);
    [snapshot, actions] = step(snapshot, { type: 'broker.lost', error: 'n2 down', retryInMs: 250 });
    expect(effects(actions)).toEqual([`raise ${retryTimer} after 250`]);
    [snapshot] = fire(snapshot, actions);
    [snapshot] = step(snapshot, { type: 'broker.connected', node: 'amqp://u:***@n3:5703' });
    expect(snapshot.value).toBe('connected');
    expect(snapshot.context).toMatchObject({ attempts: 0, lastError: null, node: 'amqp://u:***@n3:5703' });
    // A loss that says nothing falls back to the backoff by attempts.
    [snapshot, actions] = step(snapshot, lost('gone'));
    expect(effects(actions)).toEqual([`raise ${retryTimer} after ${input.retryBaseMs}`]);
  });

  it('a successful reconnect after failures resets attempts and the error', () => {
    let [snapshot, actions] = step(reach.connecting(), lost('one'));
    [snapshot] = fire(snapshot, actions);
    [snapshot, actions] = step(snapshot, lost('two'));
    expect(snapshot.context).toMatchObject({ attempts: 2, lastError: 'two' });
    [snapshot] = fire(snapshot, actions);
    [snapshot, actions] = step(snapshot, connected);
    expect(snapshot.value).toBe('connected');
    expect(snapshot.context).toEqual({ ...input, attempts: 0, lastError: null, node: null, retryInMs: null });
    expect(actions).toEqual([]);
  });

  it.each([connect, blocked(), unblocked])('ignores $type', (event) => {
    const before = reach.connecting();
    const [after, actions] = transition(brokerMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('brokerMachine: connected', () => {
  it('broker.blocked → blocked: keeps the reason as the last error', () => {
    const [snapshot, actions] = step(reach.connected(), blocked('low on memory'));
    expect(snapshot.value).toBe('blocked');
    expect(snapshot.context.lastError).toBe('low on memory');
    expect(snapshot.context.attempts).toBe(0);
    expect(actions).toEqual([]);
  });

  it('broker.lost → backoff: first attempt of a new series, retry after retryBaseMs', () => {
    const [snapshot, actions] = step(reach.connected(), lost('connection reset'));
    expect(snapshot.value).toBe('backoff');
    expect(snapshot.context).toMatchObject({ attempts: 1, lastError: 'connection reset' });
    expect(effects(actions)).toEqual([`raise ${retryTimer} after ${input.retryBaseMs}`]);
  });

  it.each([connect, connected, unblocked])('ignores $type', (event) => {
    const before = reach.connected();
    const [after, actions] = transition(brokerMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('brokerMachine: blocked', () => {
  it('broker.unblocked → connected: clears the reason', () => {
    const [snapshot, actions] = step(reach.blocked(), unblocked);
    expect(snapshot.value).toBe('connected');
    expect(snapshot.context.lastError).toBeNull();
    expect(actions).toEqual([]);
  });

  it('broker.lost → backoff: attempts 1, the loss replaces the block reason', () => {
    const [snapshot, actions] = step(reach.blocked(), lost('socket closed'));
    expect(snapshot.value).toBe('backoff');
    expect(snapshot.context).toMatchObject({ attempts: 1, lastError: 'socket closed' });
    expect(effects(actions)).toEqual([`raise ${retryTimer} after ${input.retryBaseMs}`]);
  });

  it.each([connect, connected, blocked('again')])('ignores $type', (event) => {
    const before = reach.blocked();
    const [after, actions] = transition(brokerMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('brokerMachine: backoff', () => {
  it('the retry timer → connecting: cancels the timer, opens the connection again', () => {
    const [backoff, armed] = step(reach.connecting(), lost());
    const [snapshot, actions] = fire(backoff, armed);
    expect(snapshot.value).toBe('connecting');
    expect(snapshot.context.attempts).toBe(1);
    // Leaving backoff cancels its (already fired) timer; harmless, the runtime forgets it.
    expect(effects(actions)).toEqual([`cancel ${retryTimer}`, 'openConnection']);
  });

  it('each failed attempt doubles the delay, capped at retryMaxMs', () => {
    let [snapshot, actions] = step(reach.idle(), connect);
    const delays: string[] = [];
    const opens: string[] = [];
    for (let attempt = 1; attempt <= 6; attempt++) {
      opens.push(...effects(actions).filter((e) => e === 'openConnection'));
      [snapshot, actions] = step(snapshot, lost(`failure ${attempt}`));
      expect(snapshot.value).toBe('backoff');
      expect(snapshot.context).toMatchObject({ attempts: attempt, lastError: `failure ${attempt}` });
      delays.push(...effects(actions));
      [snapshot, actions] = fire(snapshot, actions);
    }
    expect(opens).toHaveLength(6);
    expect(delays).toEqual([100, 200, 400, 800, 1_000, 1_000].map((ms) => `raise ${retryTimer} after ${ms}`));
  });

  it('the cap holds for any number of attempts (no overflow to Infinity or NaN)', () => {
    let snapshot = reach.connecting();
    let actions: Actions = [];
    for (let attempt = 1; attempt <= 1_030; attempt++) {
      [snapshot, actions] = transition(brokerMachine, snapshot, lost());
      if (attempt < 1_030)
        [snapshot] = transition(brokerMachine, snapshot, { type: retryTimer } as unknown as BrokerEvent);
    }
    expect(snapshot.context.attempts).toBe(1_030);
    expect(effects(actions)).toEqual([`raise ${retryTimer} after ${input.retryMaxMs}`]);
  });

  it('a retryMaxMs below retryBaseMs caps even the first delay', () => {
    const [idle] = start({ retryBaseMs: 5_000, retryMaxMs: 2_000 });
    const [, actions] = step(run(idle, connect), lost());
    expect(effects(actions)).toEqual([`raise ${retryTimer} after 2000`]);
  });

  it('a loss after a working connection starts the series again at retryBaseMs', () => {
    let [snapshot, actions] = step(reach.connecting(), lost());
    [snapshot] = fire(snapshot, actions);
    [snapshot, actions] = step(snapshot, lost());
    expect(effects(actions)).toEqual([`raise ${retryTimer} after 200`]);
    [snapshot] = fire(snapshot, actions);
    [snapshot] = step(snapshot, connected);
    [snapshot, actions] = step(snapshot, lost());
    expect(snapshot.context.attempts).toBe(1);
    expect(effects(actions)).toEqual([`raise ${retryTimer} after ${input.retryBaseMs}`]);
  });

  it.each([connect, connected, lost(), blocked(), unblocked])(
    'ignores $type (nothing opens before the timer)',
    (event) => {
      const before = reach.backoff();
      const [after, actions] = transition(brokerMachine, before, event);
      expect(after).toBe(before);
      expect(actions).toEqual([]);
    },
  );
});

describe('brokerMachine: broker.stop from every state', () => {
  const states = Object.keys(reach) as Array<keyof typeof reach>;
  /** backoff's timer is cancelled on the way out; nothing else is armed anywhere. */
  const cancels: Record<keyof typeof reach, string[]> = {
    idle: [],
    connecting: [],
    connected: [],
    blocked: [],
    backoff: [`cancel ${retryTimer}`],
  };

  it.each(states)('%s → stopped (final): closes the connection once, keeps the context', (state) => {
    const before = reach[state]();
    expect(stateName(before.value)).toBe(state);
    const [snapshot, actions] = step(before, stop);
    expect(snapshot.value).toBe('stopped');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual(before.context);
    expect(effects(actions)).toEqual([...cancels[state], 'closeConnection']);
  });

  it('stopped ignores every other event: nothing reopens', () => {
    const stopped = run(reach.connected(), stop);
    for (const event of sampleEvents.filter((e) => e.type !== 'broker.stop')) {
      const [after, actions] = transition(brokerMachine, stopped, event);
      expect(after, event.type).toBe(stopped);
      expect(actions, event.type).toEqual([]);
    }
  });

  // Regression: `broker.stop` once sat on the root, so a finished `stopped` actor re-entered it
  // and asked for closeConnection again under replay's pure transition.
  it('stopped ignores a second broker.stop (no second closeConnection)', () => {
    const stopped = run(reach.connected(), stop);
    const [after, actions] = transition(brokerMachine, stopped, stop);
    expect(after.value).toBe('stopped');
    expect(after.status).toBe('done');
    expect(effects(actions)).toEqual([]);
  });
});

describe('brokerMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    expect(unsampledEventTypes(brokerMachine, sampleEvents)).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    expect(allStateIds(brokerMachine)).toEqual([
      'broker.backoff',
      'broker.blocked',
      'broker.connected',
      'broker.connecting',
      'broker.idle',
      'broker.stopped',
    ]);
    // attempts grows with every failed retry: stop exploring after a few.
    const stopWhen = (snapshot: Snapshot): boolean => snapshot.context.attempts > 2;
    expect(unreachedStateIds(brokerMachine, { input, events: sampleEvents, stopWhen })).toEqual([]);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    // 8 state transitions + broker.stop from each of the 5 live states.
    expect(coverage.declaredCount()).toBe(13);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
