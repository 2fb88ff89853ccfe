import { type GraphState, type GraphTransition, type MachineGraph, StateKind } from './machineGraph.js';
import type { MachineMarks } from './traceMarks.js';

/** A flow to mark on a diagram: its id and how it went through this machine (if at all). */
export interface DiagramTrace {
  readonly traceId: string;
  readonly marks: MachineMarks | undefined;
}

const reserved = new Set([
  'end',
  'state',
  'note',
  'class',
  'classDef',
  'direction',
  'style',
  'as',
  'default',
]);

/**
 * The machine as a Mermaid `stateDiagram-v2`. Nested states become composite blocks, and each
 * transition is written in the block of the closest state holding both ends, where Mermaid
 * expects it. With a trace, the transitions it took end with `(×count)` and the top-level
 * states it reached get the class `taken` (Mermaid styles no state inside a composite).
 */
export function renderMermaid(graph: MachineGraph, trace?: DiagramTrace): string {
  const ids = mermaidIds(graph);
  const id = (stateId: string): string => ids.get(stateId) as string;
  const marks = trace?.marks;
  const counted = (label: string, count: number | undefined): string =>
    count === undefined ? label : `${label} (×${count})`;
  const lines = ['---', `title: ${graph.kind}`, '---', 'stateDiagram-v2'];
  lines.push(
    `  %% The ${graph.kind} machine of src/machines, drawn by \`agentbridge viz\` from its definition.`,
  );
  if (graph.transitions.some((t) => t.fromRoot)) {
    lines.push(
      '  %% A transition declared on the machine itself is drawn from every top-level state it applies in.',
    );
  }
  if (trace) {
    lines.push(
      `  %% Trace ${trace.traceId}: ${marks ? `${marks.created} actor(s) created;` : 'never used this machine;'} ` +
        'a transition it took ends with (×times), a state it reached has class taken.',
    );
  }

  const block = (parent: GraphState | null, indent: string): void => {
    const children = graph.states.filter((s) => s.parent === (parent?.id ?? null));
    for (const state of children) {
      const label = state.name === id(state.id) ? '' : `"${state.name}" as `;
      if (state.kind === StateKind.compound) {
        lines.push(`${indent}state ${label}${id(state.id)} {`);
        block(state, `${indent}  `);
        lines.push(`${indent}}`);
      } else if (label) lines.push(`${indent}state ${label}${id(state.id)}`);
    }
    const initial = parent ? parent.initial : graph.initial;
    if (initial) {
      const created = parent ? undefined : marks?.created || undefined;
      lines.push(`${indent}[*] --> ${id(initial)}${created ? ` : ${counted('created', created)}` : ''}`);
    }
    for (const t of graph.transitions.filter((t) => enclosing(graph, t) === (parent?.id ?? null))) {
      lines.push(
        `${indent}${id(t.source)} --> ${id(t.target)} : ${counted(t.label, marks?.transitions.get(t.id))}`,
      );
    }
    for (const state of children.filter((s) => s.kind === StateKind.final)) {
      lines.push(`${indent}${id(state.id)} --> [*]`);
    }
  };
  block(null, '  ');

  const taken = graph.states.filter(
    (s) => s.parent === null && s.kind !== StateKind.compound && marks?.states.has(s.id),
  );
  if (taken.length > 0) {
    lines.push('  classDef taken fill:#fde68a,stroke:#b45309,stroke-width:2px');
    for (const state of taken) lines.push(`  class ${id(state.id)} taken`);
  }
  return `${lines.join('\n')}\n`;
}

/** The id of the closest state that holds both ends of the transition (null: the machine). */
function enclosing(graph: MachineGraph, t: GraphTransition): string | null {
  const source = t.source.split('.');
  const target = t.target.split('.');
  let common = 0;
  while (common < source.length - 1 && common < target.length - 1 && source[common] === target[common])
    common++;
  const id = source.slice(0, common).join('.');
  return id === '' ? null : (graph.states.find((s) => s.id === id)?.id ?? null);
}

/**
 * Mermaid ids for the states: the path with `_` for anything but letters and digits (so
 * `dead-lettered` is `dead_lettered` and `active.idle` is `active_idle`), made unique.
 */
function mermaidIds(graph: MachineGraph): Map<string, string> {
  const ids = new Map<string, string>();
  const used = new Set<string>();
  for (const state of graph.states) {
    let base = state.id.replace(/[^A-Za-z0-9]/g, '_');
    if (reserved.has(base)) base = `${base}_`;
    let candidate = base;
    for (let n = 2; used.has(candidate); n++) candidate = `${base}_${n}`;
    used.add(candidate);
    ids.set(state.id, candidate);
  }
  return ids;
}
