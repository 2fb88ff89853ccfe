import { actorKinds, machines } from '../machines/index.js';
import { type PageTrace, renderHtml } from './html.js';
import { type MachineGraph, machineGraph } from './machineGraph.js';
import { renderMermaid } from './mermaid.js';

/** The graph of every machine in the registry, in registry order. */
export function registryGraphs(): MachineGraph[] {
  return actorKinds.map((kind) => machineGraph(kind, machines[kind].machine));
}

export interface VizFile {
  /** The file's name in the output folder. */
  readonly name: string;
  readonly content: string;
}

/**
 * What `agentbridge viz` writes: `<machine>.mmd` for each machine and `index.html` with them all.
 * The same function makes docs/machines and the test that finds them stale.
 */
export function vizFiles(graphs: readonly MachineGraph[], trace?: PageTrace): VizFile[] {
  const diagrams = graphs.map((graph) => ({
    name: `${graph.kind}.mmd`,
    content: renderMermaid(
      graph,
      trace ? { traceId: trace.marks.traceId, marks: trace.marks.machines.get(graph.kind) } : undefined,
    ),
  }));
  return [...diagrams, { name: 'index.html', content: renderHtml(graphs, trace) }];
}
