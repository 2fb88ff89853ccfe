import { describe, expect, it } from 'vitest';
import { type ExecutableActionsFrom, initialTransition, type SnapshotFrom, transition } from 'xstate';
import { stateName } from '../../src/kernel/stateName.js';
import { type EntityEvent, type EntityInput, entityMachine } from '../../src/machines/entityMachine.js';
import {
  allStateIds,
  createMachineCoverage,
  unreachedStateIds,
  unsampledEventTypes,
} from '../support/machineCoverage.js';

type Snapshot = SnapshotFrom<typeof entityMachine>;
type Actions = ExecutableActionsFrom<typeof entityMachine>[];

const input: EntityInput = {
  gid: '3f1c2a7e-0000-4000-8000-000000000001',
  name: 'worker-1',
  kind: 'worker',
  host: 'host-a',
  groups: ['backend'],
  mode: 'inject',
};

// Coverage of declared transitions (test/support/machineCoverage.ts): every step records the
// (state, transition) pair it took; the last test compares that with the graph.

const coverage = createMachineCoverage(entityMachine);
const step = (snapshot: Snapshot, event: EntityEvent): [Snapshot, Actions] => coverage.step(snapshot, event);

function run(snapshot: Snapshot, ...events: EntityEvent[]): Snapshot {
  let current = snapshot;
  for (const event of events) [current] = step(current, event);
  return current;
}

const activated: EntityEvent = { type: 'entity.activated' };
const idle: EntityEvent = { type: 'entity.idle' };
const busy = (status: 'working' | 'blocked' | 'unknown' = 'working'): EntityEvent => ({
  type: 'entity.busy',
  status,
});
const deregistered: EntityEvent = { type: 'entity.deregistered' };
const rehydrated: EntityEvent = { type: 'actor.rehydrated' };
const ownerAnswered: EntityEvent = { type: 'entity.ownerAnswered', request: 1, decision: 'allow', by: 'ana' };
const sampleEvents: EntityEvent[] = [activated, idle, busy(), deregistered, rehydrated, ownerAnswered];

const registered = (): Snapshot => initialTransition(entityMachine, input)[0];
const reach = {
  registered,
  'active.idle': () => run(registered(), activated),
  'active.busy': () => run(registered(), activated, busy()),
} as const satisfies Record<string, () => Snapshot>;

describe('entityMachine: initial state', () => {
  it('starts registered, with the input as context and no actions', () => {
    const [snapshot, actions] = initialTransition(entityMachine, input);
    expect(snapshot.value).toBe('registered');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual(input);
    expect(actions).toEqual([]);
  });
});

describe('entityMachine: registered', () => {
  it('entity.activated → active.idle', () => {
    const [snapshot, actions] = step(registered(), activated);
    expect(snapshot.value).toEqual({ active: 'idle' });
    expect(actions).toEqual([]);
  });

  it('actor.rehydrated is ignored: still waiting for its pane to report', () => {
    const before = registered();
    const [after, actions] = step(before, rehydrated);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });

  it.each([idle, busy()])('ignores $type before activation', (event) => {
    const before = registered();
    const [after, actions] = transition(entityMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('entityMachine: active.idle', () => {
  it.each(['working', 'blocked', 'unknown'] as const)('entity.busy (%s) → active.busy', (status) => {
    const [snapshot, actions] = step(reach['active.idle'](), busy(status));
    expect(snapshot.value).toEqual({ active: 'busy' });
    expect(snapshot.context).toEqual(input);
    expect(actions).toEqual([]);
  });

  it('actor.rehydrated → registered: the pane status is unknown until it reports again', () => {
    const [snapshot, actions] = step(reach['active.idle'](), rehydrated);
    expect(snapshot.value).toBe('registered');
    expect(actions).toEqual([]);
  });

  it.each([activated, idle])('ignores $type', (event) => {
    const before = reach['active.idle']();
    const [after, actions] = transition(entityMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe("entityMachine: its owner's answer to its agent's permission request (issue 33)", () => {
  it.each(['active.idle', 'active.busy'] as const)(
    '%s: entity.ownerAnswered is recorded, with its one effect, and changes nothing else',
    (state) => {
      const before = reach[state]();
      const [snapshot, actions] = step(before, ownerAnswered);
      expect(stateName(snapshot.value)).toBe(state);
      expect(snapshot.context).toEqual(input);
      expect(actions.map((a) => a.type)).toEqual(['ownerAnswered']);
    },
  );

  it('registered: ignores it (no agent is known to ask yet)', () => {
    const before = registered();
    const [after, actions] = transition(entityMachine, before, ownerAnswered);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('entityMachine: active.busy', () => {
  it('entity.idle → active.idle', () => {
    const [snapshot, actions] = step(reach['active.busy'](), idle);
    expect(snapshot.value).toEqual({ active: 'idle' });
    expect(actions).toEqual([]);
  });

  it('actor.rehydrated → registered', () => {
    const [snapshot] = step(reach['active.busy'](), rehydrated);
    expect(snapshot.value).toBe('registered');
  });

  it.each([activated, busy('blocked')])('ignores $type', (event) => {
    const before = reach['active.busy']();
    const [after, actions] = transition(entityMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('entityMachine: entity.deregistered from every non-final state', () => {
  it.each(Object.keys(reach) as Array<keyof typeof reach>)('%s → gone (final)', (state) => {
    const before = reach[state]();
    expect(stateName(before.value)).toBe(state);
    const [snapshot, actions] = step(before, deregistered);
    expect(snapshot.value).toBe('gone');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toEqual(input);
    expect(actions).toEqual([]);
  });
});

describe('entityMachine: gone', () => {
  it('ignores every event that a state declares', () => {
    const before = run(registered(), deregistered);
    for (const event of sampleEvents.filter((e) => e.type !== 'entity.deregistered')) {
      const [after, actions] = transition(entityMachine, before, event);
      expect(after, event.type).toBe(before);
      expect(actions, event.type).toEqual([]);
    }
  });

  it('stays gone on a second entity.deregistered', () => {
    const before = run(registered(), deregistered);
    const [after, actions] = transition(entityMachine, before, deregistered);
    expect(after.value).toBe('gone');
    expect(after.status).toBe('done');
    expect(actions).toEqual([]);
  });
});

describe('entityMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    expect(unsampledEventTypes(entityMachine, sampleEvents)).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    expect(allStateIds(entityMachine)).toEqual([
      'entity.active',
      'entity.active.busy',
      'entity.active.idle',
      'entity.gone',
      'entity.registered',
    ]);
    expect(unreachedStateIds(entityMachine, { input, events: sampleEvents })).toEqual([]);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    expect(coverage.declaredCount()).toBe(10);
    expect(coverage.uncovered()).toEqual([]);
    expect(coverage.undeclared()).toEqual([]);
  });
});
