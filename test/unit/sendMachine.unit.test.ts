import { describe, expect, it } from 'vitest';
import {
  type AnyStateMachine,
  type AnyTransitionDefinition,
  type ExecutableActionsFrom,
  initialTransition,
  type SnapshotFrom,
  transition,
} from 'xstate';
import type { DirectedGraphEdge, DirectedGraphNode } from 'xstate/graph';
import { getShortestPaths, getStateNodes, toDirectedGraph } from 'xstate/graph';
import { type SendEvent, type SendInput, sendMachine } from '../../src/machines/sendMachine.js';
import { stateName } from '../../src/runtime/stateName.js';

type Snapshot = SnapshotFrom<typeof sendMachine>;
type Actions = ExecutableActionsFrom<typeof sendMachine>[];

const input: SendInput = {
  msgId: 'msg-7',
  traceId: 'trace-7',
  kind: 'message',
  sender: 'main-gid',
  recipient: 'worker-gid',
  digest: 'sha256:def',
  size: 42,
};

// Coverage of declared transitions (see deliveryMachine.unit.test.ts for the idea).

function transitionKey(t: AnyTransitionDefinition): string {
  const targets = t.target?.map((node) => node.path.join('.')).join(',') ?? '(none)';
  return `${t.eventType} -> ${targets}`;
}

function graphEdges(machine: AnyStateMachine): DirectedGraphEdge[] {
  const edges: DirectedGraphEdge[] = [];
  const walk = (node: DirectedGraphNode): void => {
    edges.push(...node.edges);
    for (const child of node.children) walk(child);
  };
  walk(toDirectedGraph(machine));
  return edges;
}

function declaredPairs(machine: AnyStateMachine): Set<string> {
  const pairs = new Set<string>();
  for (const edge of graphEdges(machine)) {
    const leaves = [edge.source, ...getStateNodes(edge.source)].filter((node) => node.type === 'atomic');
    for (const leaf of leaves) pairs.add(`${leaf.path.join('.')}: ${transitionKey(edge.transition)}`);
  }
  return pairs;
}

const covered = new Set<string>();

function step(snapshot: Snapshot, event: SendEvent): [Snapshot, Actions] {
  if (snapshot.status === 'active') {
    for (const t of sendMachine.getTransitionData(snapshot, event)) {
      covered.add(`${stateName(snapshot.value)}: ${transitionKey(t)}`);
    }
  }
  return transition(sendMachine, snapshot, event);
}

const routedLocal: SendEvent = { type: 'send.routedLocal' };
const published: SendEvent = { type: 'send.published' };
const confirmed: SendEvent = { type: 'send.confirmed' };
const failed = (code = 'UNKNOWN_RECIPIENT', detail?: string): SendEvent =>
  detail === undefined ? { type: 'send.failed', code } : { type: 'send.failed', code, detail };
const rehydrated: SendEvent = { type: 'actor.rehydrated' };
const sampleEvents: SendEvent[] = [routedLocal, published, confirmed, failed('X', 'y'), rehydrated];

const accepted = (): Snapshot => initialTransition(sendMachine, input)[0];
const publishedState = (): Snapshot => step(accepted(), published)[0];

/** Only `recordFailure` is an action of this machine; it runs inside the transition. */
function actionTypes(actions: Actions): string[] {
  return actions.map((action) => action.type);
}

describe('sendMachine: initial state', () => {
  it('starts accepted with the input as context and no failure', () => {
    const [snapshot, actions] = initialTransition(sendMachine, input);
    expect(snapshot.value).toBe('accepted');
    expect(snapshot.status).toBe('active');
    expect(snapshot.context).toEqual({ ...input, failure: null });
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: accepted', () => {
  it('send.routedLocal → routed-local (final)', () => {
    const [snapshot, actions] = step(accepted(), routedLocal);
    expect(snapshot.value).toBe('routed-local');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context.failure).toBeNull();
    expect(actions).toEqual([]);
  });

  it('send.published → published', () => {
    const [snapshot, actions] = step(accepted(), published);
    expect(snapshot.value).toBe('published');
    expect(snapshot.status).toBe('active');
    expect(actions).toEqual([]);
  });

  it('send.failed → failed (final), recording "code: detail"', () => {
    const [snapshot, actions] = step(accepted(), failed('UNKNOWN_RECIPIENT', 'no inbox for worker-gid'));
    expect(snapshot.value).toBe('failed');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context.failure).toBe('UNKNOWN_RECIPIENT: no inbox for worker-gid');
    // assign actions are applied by the transition itself, not handed back to run.
    expect(actionTypes(actions)).toEqual([]);
  });

  // Regression (was a bug in src/machines/sendMachine.ts, recordFailure): `${code}: ${detail ?? ''}`.trim() trims
  // the space but keeps the separator, so the failure reads "TEXT_TOO_LARGE:".
  it('send.failed without a detail records the code alone', () => {
    const [snapshot] = transition(sendMachine, accepted(), failed('TEXT_TOO_LARGE'));
    expect(snapshot.context.failure).toBe('TEXT_TOO_LARGE');
  });

  it.each([confirmed, rehydrated])('ignores $type', (event) => {
    const before = accepted();
    const [after, actions] = transition(sendMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: published', () => {
  it('send.confirmed → confirmed (final)', () => {
    const [snapshot, actions] = step(publishedState(), confirmed);
    expect(snapshot.value).toBe('confirmed');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context.failure).toBeNull();
    expect(actions).toEqual([]);
  });

  it('send.failed → failed (final), recording the failure', () => {
    const [snapshot] = step(publishedState(), failed('BROKER_UNAVAILABLE', 'nacked'));
    expect(snapshot.value).toBe('failed');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context.failure).toBe('BROKER_UNAVAILABLE: nacked');
  });

  it.each([routedLocal, published, rehydrated])('ignores $type', (event) => {
    const before = publishedState();
    const [after, actions] = transition(sendMachine, before, event);
    expect(after).toBe(before);
    expect(actions).toEqual([]);
  });
});

describe('sendMachine: final states ignore every event', () => {
  const finals = {
    'routed-local': () => step(accepted(), routedLocal)[0],
    confirmed: () => step(publishedState(), confirmed)[0],
    failed: () => step(accepted(), failed('X', 'y'))[0],
  };

  it.each(Object.keys(finals) as Array<keyof typeof finals>)('%s', (state) => {
    const before = finals[state]();
    expect(before.value).toBe(state);
    expect(before.status).toBe('done');
    for (const event of sampleEvents) {
      const [after, actions] = transition(sendMachine, before, event);
      expect(after, event.type).toBe(before);
      expect(actions, event.type).toEqual([]);
    }
  });
});

describe('sendMachine: graph', () => {
  it('the sample events name every event the machine declares a transition for', () => {
    const declared = new Set(graphEdges(sendMachine).map((edge) => edge.transition.eventType));
    const sampled = new Set(sampleEvents.map((event) => event.type));
    expect([...declared].filter((type) => !sampled.has(type))).toEqual([]);
  });

  it('every state node is reachable from the initial state', () => {
    const paths = getShortestPaths(sendMachine, { input, events: sampleEvents });
    const reached = new Set(paths.flatMap((path) => path.state._nodes.map((node) => node.id)));
    const all = getStateNodes(sendMachine.root).map((node) => node.id);
    expect(all.sort()).toEqual([
      'send.accepted',
      'send.confirmed',
      'send.failed',
      'send.published',
      'send.routed-local',
    ]);
    expect(all.filter((id) => !reached.has(id))).toEqual([]);
  });

  // Must stay last: it checks what the tests above exercised.
  it('every declared (state, transition) pair is exercised by a test above', () => {
    const declared = declaredPairs(sendMachine);
    expect(declared.size).toBe(5);
    expect([...declared].filter((pair) => !covered.has(pair)).sort()).toEqual([]);
    expect([...covered].filter((pair) => !declared.has(pair)).sort()).toEqual([]);
  });
});
