import type { AnyStateMachine, AnyStateNode, AnyTransitionDefinition } from 'xstate';
import { type DirectedGraphEdge, type DirectedGraphNode, toDirectedGraph } from 'xstate/graph';

/**
 * A machine definition as a plain graph: what the Mermaid and SVG renderers draw and what a
 * recorded flow is matched against. Read from the definition itself (XState's directed graph),
 * so the diagrams follow the code.
 */
export interface MachineGraph {
  /** The registry key (the actor kind recorded in the event log). */
  readonly kind: string;
  /** The top-level initial state's id. */
  readonly initial: string;
  /** Every state, parents before their children, in definition order. */
  readonly states: readonly GraphState[];
  readonly transitions: readonly GraphTransition[];
}

export const StateKind = { atomic: 'atomic', compound: 'compound', final: 'final' } as const;
export type StateKind = (typeof StateKind)[keyof typeof StateKind];

export interface GraphState {
  /** Dotted path from the root, as the event log names states: `active.idle`. */
  readonly id: string;
  /** The state's own key: `idle`. */
  readonly name: string;
  /** The enclosing state's id; null at the top level. */
  readonly parent: string | null;
  readonly kind: StateKind;
  /** A compound state's initial child's id. */
  readonly initial: string | null;
}

export interface GraphTransition {
  /** Unique within the machine and stable while the definition is: `source|event|target#n`. */
  readonly id: string;
  readonly source: string;
  /** The target state's id; the source's own id for a transition with no target. */
  readonly target: string;
  /** The event type as the log records it (delayed ones as `xstate.after.<delay>.<node>`). */
  readonly event: string;
  /** What a diagram shows: the event, `after <delay>`, a guard in brackets, `(internal)`. */
  readonly label: string;
  /** No target: the state stays, without exit or entry. */
  readonly internal: boolean;
  /**
   * Declared on the machine itself, so it applies in every state; drawn from each top-level
   * state that is not final (a finished machine takes no events).
   */
  readonly fromRoot: boolean;
}

/** The graph of one machine of the registry. */
export function machineGraph(kind: string, machine: AnyStateMachine): MachineGraph {
  const states: GraphState[] = [];
  const declared: DirectedGraphEdge[] = [];
  const walk = (node: DirectedGraphNode): void => {
    const stateNode = node.stateNode;
    if (stateNode.parent) states.push(toState(stateNode));
    for (const edge of node.edges) declared.push(edge);
    for (const child of node.children) walk(child);
  };
  walk(toDirectedGraph(machine));

  const topLevel = states.filter((s) => s.parent === null && s.kind !== StateKind.final);
  const transitions: GraphTransition[] = [];
  const seen = new Map<string, number>();
  const add = (edge: DirectedGraphEdge, source: string, fromRoot: boolean): void => {
    const internal = edge.transition.target === undefined;
    const target = internal ? source : idOf(edge.target);
    const event = edge.transition.eventType;
    const base = `${source}|${event}|${target}`;
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    transitions.push({
      id: `${base}#${n}`,
      source,
      target,
      event,
      label: labelOf(edge.transition, internal),
      internal,
      fromRoot,
    });
  };
  for (const edge of declared) {
    if (edge.source.parent) add(edge, idOf(edge.source), false);
    else for (const state of topLevel) add(edge, state.id, true);
  }
  const initial = machine.root.initial?.target[0];
  if (!initial) throw new Error(`machine ${kind} has no initial state`);
  return { kind, initial: idOf(initial), states, transitions };
}

function toState(node: AnyStateNode): GraphState {
  const kind =
    node.type === 'final' ? StateKind.final : node.type === 'atomic' ? StateKind.atomic : StateKind.compound;
  const initial = node.initial?.target[0];
  return {
    id: idOf(node),
    name: node.key,
    parent: node.parent?.parent ? idOf(node.parent) : null,
    kind,
    initial: initial ? idOf(initial) : null,
  };
}

function idOf(node: AnyStateNode): string {
  return node.path.join('.');
}

function labelOf(transition: AnyTransitionDefinition, internal: boolean): string {
  const delay = (transition as { delay?: unknown }).delay;
  const event =
    delay === undefined
      ? transition.eventType
      : `after ${typeof delay === 'number' ? `${delay} ms` : String(delay)}`;
  const guard = guardName(transition.guard);
  return `${event}${guard ? ` [${guard}]` : ''}${internal ? ' (internal)' : ''}`;
}

function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'function') return guard.name || 'guard';
  if (typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string') {
    // A parameterized guard shows its parameters: `isReceipt(queued)`, not six alike labels.
    const params = 'params' in guard ? guard.params : undefined;
    const values =
      params !== null && typeof params === 'object'
        ? Object.values(params).filter((v) => ['string', 'number', 'boolean'].includes(typeof v))
        : [];
    return values.length > 0 ? `${guard.type}(${values.join(', ')})` : guard.type;
  }
  return 'guard';
}

/** The state with this id; throws on an id the graph does not have (a bug, not input). */
export function stateOf(graph: MachineGraph, id: string): GraphState {
  const state = graph.states.find((s) => s.id === id);
  if (!state) throw new Error(`machine ${graph.kind} has no state ${id}`);
  return state;
}

/** Whether `id` is `ancestor` or lies inside it. */
export function isWithin(id: string, ancestor: string): boolean {
  return id === ancestor || id.startsWith(`${ancestor}.`);
}
