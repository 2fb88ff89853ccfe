import {
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type AnyTransitionDefinition,
  type EventFromLogic,
  type ExecutableActionsFrom,
  type InputFrom,
  type SnapshotFrom,
  transition,
} from 'xstate';
import {
  type DirectedGraphEdge,
  type DirectedGraphNode,
  getShortestPaths,
  getStateNodes,
  toDirectedGraph,
} from 'xstate/graph';
import { stateName } from '../../src/kernel/stateName.js';

/**
 * Coverage of a machine's declared transitions, shared by the machine unit tests. Every step a
 * test takes through `coverage.step` records which (state, transition) pair of the definition
 * the event took; the last test of the file compares that record with the graph, so a
 * transition added to a machine without a test fails the suite.
 */

/** `event -> target` of one transition definition. */
export function transitionKey(t: AnyTransitionDefinition): string {
  const targets = t.target?.map((node) => node.path.join('.')).join(',') ?? '(none)';
  return `${t.eventType} -> ${targets}`;
}

/** Every edge of the machine's directed graph, nested states included. */
export function graphEdges(machine: AnyStateMachine): DirectedGraphEdge[] {
  const edges: DirectedGraphEdge[] = [];
  const walk = (node: DirectedGraphNode): void => {
    edges.push(...node.edges);
    for (const child of node.children) walk(child);
  };
  walk(toDirectedGraph(machine));
  return edges;
}

/**
 * The event types the machine declares a transition for (delayed `xstate.after.*` ones
 * included) that none of `events` has: a test's sample events must name them all.
 */
export function unsampledEventTypes(
  machine: AnyStateMachine,
  events: ReadonlyArray<{ type: string }>,
): string[] {
  const sampled = new Set(events.map((event) => event.type));
  const declared = new Set(graphEdges(machine).map((edge) => edge.transition.eventType));
  return [...declared].filter((type) => !sampled.has(type)).sort();
}

/**
 * `state: event -> target` for every atomic state each declared transition applies in. A
 * transition declared on a parent (or the root) counts once per atomic descendant; final
 * states are not atomic, so handlers inherited by them are not expected to be exercised.
 */
export function declaredPairs(machine: AnyStateMachine): Set<string> {
  const pairs = new Set<string>();
  for (const edge of graphEdges(machine)) {
    const leaves = [edge.source, ...getStateNodes(edge.source)].filter((node) => node.type === 'atomic');
    for (const leaf of leaves) pairs.add(`${leaf.path.join('.')}: ${transitionKey(edge.transition)}`);
  }
  return pairs;
}

export interface ReachabilityOptions<TMachine extends AnyStateMachine> {
  input: InputFrom<TMachine>;
  events: ReadonlyArray<EventFromLogic<TMachine>>;
  /**
   * Where to stop exploring: needed when the context grows without bound (a retry counter),
   * which otherwise makes every snapshot new and the traversal endless.
   */
  stopWhen?: (snapshot: SnapshotFrom<TMachine>) => boolean;
}

/** Ids of the state nodes that no shortest path from the initial state reaches with `events`. */
export function unreachedStateIds<TMachine extends AnyStateMachine>(
  machine: TMachine,
  options: ReachabilityOptions<TMachine>,
): string[] {
  const { stopWhen } = options;
  const paths = getShortestPaths(machine as AnyStateMachine, {
    input: options.input,
    events: [...options.events],
    stopWhen: stopWhen && ((snapshot: AnyMachineSnapshot) => stopWhen(snapshot as SnapshotFrom<TMachine>)),
  });
  const reached = new Set(paths.flatMap((path) => path.state._nodes.map((node) => node.id)));
  return allStateIds(machine).filter((id) => !reached.has(id));
}

/** Ids of every state node of the machine, sorted. */
export function allStateIds(machine: AnyStateMachine): string[] {
  return getStateNodes(machine.root)
    .map((node) => node.id)
    .sort();
}

export interface MachineCoverage<TMachine extends AnyStateMachine> {
  /** XState's pure `transition`, recording the (state, transition) pairs the event takes. */
  step(
    snapshot: SnapshotFrom<TMachine>,
    event: EventFromLogic<TMachine>,
  ): [SnapshotFrom<TMachine>, ExecutableActionsFrom<TMachine>[]];
  /** Declared pairs that no `step` took, sorted. */
  uncovered(): string[];
  /** Pairs a `step` took that the graph does not declare (the key format drifted), sorted. */
  undeclared(): string[];
  /** How many pairs the machine declares. */
  declaredCount(): number;
}

export function createMachineCoverage<TMachine extends AnyStateMachine>(
  machine: TMachine,
): MachineCoverage<TMachine> {
  const covered = new Set<string>();
  const declared = (): Set<string> => declaredPairs(machine);
  return {
    step(snapshot, event) {
      const current = snapshot as AnyMachineSnapshot;
      // A done snapshot takes no transition at run time (ActorCell refuses events once done).
      if (current.status === 'active') {
        for (const t of (machine as AnyStateMachine).getTransitionData(current, event)) {
          covered.add(`${stateName(current.value)}: ${transitionKey(t)}`);
        }
      }
      return transition(machine, snapshot, event);
    },
    uncovered: () => [...declared()].filter((pair) => !covered.has(pair)).sort(),
    undeclared: () => {
      const all = declared();
      return [...covered].filter((pair) => !all.has(pair)).sort();
    },
    declaredCount: () => declared().size,
  };
}
