import { describe, expect, it } from 'vitest';
import {
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type EventFromLogic,
  type InputFrom,
  initialTransition,
  type SnapshotFrom,
  transition,
} from 'xstate';
import { getShortestPaths } from 'xstate/graph';
import { type ActorKind, actorKinds, machines } from '../../src/machines/index.js';
import { receiptStages } from '../../src/receipts/receipt.js';
import { pureInitialTransition, pureTransition } from '../../src/runtime/pureTransition.js';
import { graphEdges, unsampledEventTypes } from '../support/machineCoverage.js';

/**
 * The proof that production's fork of XState's pure transition (runtime/pureTransition.ts: one
 * inert actor scope per machine, reused) computes what `xstate.transition` computes: for every
 * registered machine, every step of every shortest path from its initial state agrees in state,
 * context, status and the actions to run (types and params), and neither side spawns a child.
 */

type MachineOf<K extends ActorKind> = (typeof machines)[K]['machine'];

interface Walk<M extends AnyStateMachine> {
  input: InputFrom<M>;
  /** One of every event the machine takes, with the payloads its guards tell apart. */
  events: EventFromLogic<M>[];
  /** Where to stop exploring a context that grows without bound (a counter). */
  stopWhen?: (snapshot: SnapshotFrom<M>) => boolean;
}

const deliveryInput: InputFrom<MachineOf<'delivery'>> = {
  msgId: 'msg-1',
  traceId: 'trace-1',
  recipient: 'worker-gid',
  sender: 'main-gid',
  mode: 'inject',
  acceptedAt: 1_000,
  deadline: 61_000,
  maxAttempts: 3,
  retryBaseMs: 100,
  digest: 'sha256:abc',
  size: 12,
  kind: 'ANSWER',
  turnId: 'turn-1',
};

const walks: { [K in ActorKind]: Walk<MachineOf<K>>[] } = {
  entity: [
    {
      input: { gid: 'gid-1', name: 'worker-1', kind: 'worker', host: 'host-a', groups: [], mode: 'inject' },
      events: [
        { type: 'entity.activated' },
        { type: 'entity.busy', status: 'working' },
        { type: 'entity.idle' },
        { type: 'entity.deregistered' },
        { type: 'actor.rehydrated' },
      ],
    },
  ],
  delivery: (['inject', 'hold'] as const).map((mode) => ({
    input: { ...deliveryInput, mode },
    events: [
      { type: 'delivery.inject' },
      { type: 'delivery.hold' },
      { type: 'delivery.typed' },
      { type: 'delivery.submitted', how: 'enter' },
      { type: 'delivery.notSubmitted', detail: 'still in the input' },
      { type: 'delivery.deferred', reason: 'dialog', detail: 'a dialog is open' },
      { type: 'delivery.paneReady' },
      { type: 'delivery.injectFailed', error: 'pane gone' },
      { type: 'delivery.located', where: 'absent' },
      { type: 'delivery.located', where: 'typed' },
      { type: 'delivery.located', where: 'submitted' },
      { type: 'delivery.injected' },
      { type: 'delivery.found' },
      { type: 'delivery.absent' },
      { type: 'delivery.handedOver', via: 'drain' },
      { type: 'delivery.returned' },
      { type: 'delivery.acked', via: 'pane' },
      { type: 'delivery.tooLate', turnId: 'turn-1', why: 'expired' },
      { type: 'delivery.deadLettered', reason: 'rejected', detail: 'refused' },
      { type: 'actor.rehydrated' },
    ],
  })),
  send: [
    {
      input: {
        msgId: 'msg-1',
        traceId: 'trace-1',
        kind: 'SEND',
        sender: 'main-gid',
        recipient: 'worker-gid',
        digest: 'sha256:def',
        size: 42,
      },
      events: [
        { type: 'send.routedLocal' },
        { type: 'send.published' },
        { type: 'send.confirmed' },
        { type: 'send.failed', code: 'BROKER_UNAVAILABLE', detail: 'unreachable' },
        { type: 'actor.rehydrated' },
        ...receiptStages.map((stage) => ({
          type: 'send.receipt' as const,
          stage,
          recipient: 'worker-gid',
          at: 2_000,
        })),
        // Another recipient's receipt: no transition.
        { type: 'send.receipt', stage: 'queued', recipient: 'other-gid', at: 2_000 },
      ],
    },
  ],
  broker: [
    {
      input: { hostId: 'host-a', retryBaseMs: 100, retryMaxMs: 1_000 },
      events: [
        { type: 'broker.connect' },
        { type: 'broker.connected' },
        { type: 'broker.lost', error: 'ECONNRESET' },
        { type: 'broker.blocked', reason: 'low on memory' },
        { type: 'broker.unblocked' },
        { type: 'broker.stop' },
      ],
      stopWhen: (snapshot) => snapshot.context.attempts > 2,
    },
  ],
  turn: [
    {
      input: {
        turnId: 'turn-1',
        askMsgId: 'msg-ask-1',
        traceId: 'trace-1',
        asker: 'main-gid',
        recipient: 'worker-gid',
        startedAt: 1_000,
        deadline: 31_000,
      },
      events: [
        { type: 'turn.answered', answerMsgId: 'msg-answer-1' },
        { type: 'turn.abandoned', why: 'caller gone' },
        { type: 'actor.rehydrated' },
      ],
    },
  ],
  remind: [
    {
      input: { entity: 'main-gid', firstMs: 1_000, maxMs: 8_000 },
      events: [
        { type: 'remind.held', at: 10_000, count: 2, firstMs: 2_000 },
        { type: 'remind.nudged', at: 11_000 },
        { type: 'remind.drained', at: 12_000 },
        { type: 'remind.ended' },
        { type: 'actor.rehydrated' },
      ],
      stopWhen: (snapshot) => snapshot.context.nudges > 2,
    },
  ],
  spawn: [
    {
      input: {
        requestId: 'req-1',
        traceId: 'trace-1',
        msgId: 'msg-spawn-1',
        requester: { gid: 'main-gid', name: 'main', host: 'host-a', kind: 'main' },
        profile: 'worker',
        groups: ['team'],
        digest: 'sha256:brief',
        size: 128,
      },
      events: [
        { type: 'spawn.launching', gid: 'gid-2', name: 'helper' },
        { type: 'spawn.launched', pane: '%3' },
        { type: 'spawn.launchFailed', code: 'LAUNCH_FAILED', message: 'no such profile binary' },
        { type: 'spawn.refused', code: 'UNKNOWN_PROFILE', message: 'no profile named worker' },
        { type: 'spawn.answered' },
        { type: 'spawn.stopped', by: 'main-gid' },
        { type: 'actor.rehydrated' },
      ],
    },
  ],
};

/** What a transition hands the runtime: the snapshot's parts that matter, and the actions to run. */
function outcome(snapshot: AnyMachineSnapshot, actions: ReadonlyArray<{ type: string; params?: unknown }>) {
  return {
    value: snapshot.value,
    context: snapshot.context,
    status: snapshot.status,
    children: Object.keys(snapshot.children),
    actions: actions.map((action) => ({ type: action.type, params: action.params })),
  };
}

/** The machine's delayed events (`after`): the runtime raises them, so a walk takes them too. */
function delayedEvents(machine: AnyStateMachine): Array<{ type: string }> {
  const types = graphEdges(machine)
    .map((edge) => edge.transition.eventType)
    .filter((type) => type.startsWith('xstate.after.'));
  return [...new Set(types)].map((type) => ({ type }));
}

describe('pureTransition: the fork agrees with xstate.transition', () => {
  it('every registered machine has walks', () => {
    expect(Object.keys(walks).sort()).toEqual([...actorKinds].sort());
  });

  describe.each(actorKinds)('%s', (kind) => {
    const machine: AnyStateMachine = machines[kind].machine;
    const kindWalks = walks[kind] as Walk<AnyStateMachine>[];

    it('the walks name every event the machine declares a transition for', () => {
      const sampled = kindWalks.flatMap((walk) => [...walk.events, ...delayedEvents(machine)]);
      expect(unsampledEventTypes(machine, sampled)).toEqual([]);
    });

    it('on every step of every shortest path: state, context, status, children and actions', () => {
      let steps = 0;
      for (const walk of kindWalks) {
        const events = [...walk.events, ...delayedEvents(machine)];
        const paths = getShortestPaths(machine, {
          input: walk.input,
          events,
          ...(walk.stopWhen ? { stopWhen: walk.stopWhen } : {}),
        });
        expect(paths.length).toBeGreaterThan(1);
        for (const path of paths) {
          let [library, libraryActions] = initialTransition(machine, walk.input);
          let [fork, forkActions] = pureInitialTransition(machine, walk.input);
          expect(outcome(fork, forkActions)).toEqual(outcome(library, libraryActions));
          for (const step of path.steps.slice(1)) {
            [library, libraryActions] = transition(machine, library, step.event);
            [fork, forkActions] = pureTransition(machine, fork, step.event);
            const where = `${kind}: ${step.event.type} on the way to ${JSON.stringify(path.state.value)}`;
            expect(outcome(fork, forkActions), where).toEqual(outcome(library, libraryActions));
            expect(fork.value, where).toEqual(step.state.value);
            expect(fork.children, where).toEqual({});
            steps++;
          }
        }
      }
      expect(steps).toBeGreaterThan(0);
    });
  });
});
