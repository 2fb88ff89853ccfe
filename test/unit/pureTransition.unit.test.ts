import { describe, expect, it } from 'vitest';
import { type AnyMachineSnapshot, type AnyStateMachine, initialTransition, transition } from 'xstate';
import { getShortestPaths } from 'xstate/graph';
import { pureInitialTransition, pureTransition } from '../../src/kernel/pureTransition.js';
import { actorKinds, machines } from '../../src/machines/index.js';
import { unsampledEventTypes } from '../support/machineCoverage.js';
import { delayedEvents, type Walk, walks } from '../support/machineWalks.js';

/**
 * The proof that production's fork of XState's pure transition (kernel/pureTransition.ts: one
 * inert actor scope per machine, reused) computes what `xstate.transition` computes: for every
 * registered machine, every step of every shortest path from its initial state agrees in state,
 * context, status and the actions to run (types and params), and neither side spawns a child.
 */

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
