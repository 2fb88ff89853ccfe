import { initEvent } from '../kernel/parseRecordedEvent.js';
import { type GraphTransition, isWithin, type MachineGraph } from './machineGraph.js';

/** What viz needs of a recorded event: one row of some host's event log. */
export interface RecordedTransition {
  readonly actorKind: string;
  readonly event: string;
  readonly fromState: string | null;
  readonly toState: string;
}

/** How one flow went through one machine. */
export interface MachineMarks {
  /** Actors of this kind the flow created. */
  created: number;
  /** Times each transition was taken, by transition id. */
  readonly transitions: Map<string, number>;
  /** Times each state was reached (a nested state counts for its parents too), by state id. */
  readonly states: Map<string, number>;
}

/** A recorded step the current definitions have no transition for (old log, or drift). */
export interface UnmatchedStep extends RecordedTransition {
  count: number;
}

export interface TraceMarks {
  readonly traceId: string;
  events: number;
  readonly machines: Map<string, MachineMarks>;
  readonly unmatched: UnmatchedStep[];
}

/**
 * Counts the transitions a flow took, matched to the graphs by (actor kind, from state, event,
 * to state). The log names the atomic state an actor was in; a transition declared on a parent
 * (or the machine) matches from any state inside it, the deepest declaration first, as XState
 * picks it. Streaming: one call per event, nothing kept but the counts.
 */
export class TraceMarker {
  private readonly marks: TraceMarks;
  private readonly graphs: ReadonlyMap<string, MachineGraph>;

  constructor(traceId: string, graphs: readonly MachineGraph[]) {
    this.graphs = new Map(graphs.map((g) => [g.kind, g]));
    this.marks = { traceId, events: 0, machines: new Map(), unmatched: [] };
  }

  add(step: RecordedTransition): void {
    this.marks.events++;
    const graph = this.graphs.get(step.actorKind);
    const id = graph && matchTransition(graph, step);
    if (!graph || id === undefined) {
      this.unmatched(step);
      return;
    }
    const marks = this.machine(graph.kind);
    if (id === null) marks.created++;
    else marks.transitions.set(id, (marks.transitions.get(id) ?? 0) + 1);
    for (const state of graph.states) {
      if (isWithin(step.toState, state.id)) marks.states.set(state.id, (marks.states.get(state.id) ?? 0) + 1);
    }
  }

  result(): TraceMarks {
    return this.marks;
  }

  private machine(kind: string): MachineMarks {
    let marks = this.marks.machines.get(kind);
    if (!marks) {
      marks = { created: 0, transitions: new Map(), states: new Map() };
      this.marks.machines.set(kind, marks);
    }
    return marks;
  }

  private unmatched(step: RecordedTransition): void {
    const same = this.marks.unmatched.find(
      (u) =>
        u.actorKind === step.actorKind &&
        u.event === step.event &&
        u.fromState === step.fromState &&
        u.toState === step.toState,
    );
    if (same) same.count++;
    else
      this.marks.unmatched.push({
        actorKind: step.actorKind,
        event: step.event,
        fromState: step.fromState,
        toState: step.toState,
        count: 1,
      });
  }
}

/**
 * The id of the transition a recorded step took; null for an actor's creation (it enters the
 * initial state), undefined when the graph has no such transition.
 */
export function matchTransition(graph: MachineGraph, step: RecordedTransition): string | null | undefined {
  const { fromState, toState, event } = step;
  if (fromState === null) {
    return event === initEvent && graph.states.some((s) => s.id === toState) ? null : undefined;
  }
  // A root transition is drawn from each top-level state but declared above them all.
  const depth = (t: GraphTransition): number => (t.fromRoot ? 0 : t.source.split('.').length);
  const candidates = graph.transitions
    .filter(
      (t) =>
        t.event === event &&
        isWithin(fromState, t.source) &&
        (t.internal ? toState === fromState : isWithin(toState, t.target)),
    )
    .sort((a, b) => depth(b) - depth(a));
  return candidates[0]?.id;
}
