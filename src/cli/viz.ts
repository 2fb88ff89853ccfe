import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BridgeError, ErrorCode } from '../errors.js';
import { replayTrace } from '../replay/replayTrace.js';
import type { PageTrace } from '../viz/html.js';
import type { MachineGraph } from '../viz/machineGraph.js';
import { TraceMarker } from '../viz/traceMarks.js';
import { registryGraphs, vizFiles } from '../viz/vizFiles.js';
import type { CliValues } from './cliOptions.js';
import { printResult, writeHuman } from './output.js';

/**
 * `agentbridge viz [--out DIR] [--trace ID LOG...]`: every machine as a Mermaid state diagram
 * (`DIR/<machine>.mmd`) and all of them on one offline page (`DIR/index.html`); with a trace,
 * the transitions that flow took are marked with their counts.
 */
export function runViz(values: CliValues, logs: string[]): number {
  const out = values.out ?? 'bridge-viz';
  const graphs = registryGraphs();
  const trace = values.trace === undefined ? undefined : markTrace(values.trace, logs, graphs);
  if (!trace && logs.length > 0) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `viz reads event logs only to mark a flow: add --trace ID (got "${logs.join(' ')}")`,
    );
  }
  const files = vizFiles(graphs, trace);
  try {
    mkdirSync(out, { recursive: true });
    for (const file of files) writeFileSync(join(out, file.name), file.content);
  } catch (err) {
    throw new BridgeError(ErrorCode.badRequest, `cannot write to ${out}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const written = files.map((file) => join(out, file.name));
  const marked = trace ? traceSummary(trace, graphs) : undefined;
  const summary = {
    out,
    files: written,
    machines: graphs.map((g) => ({
      kind: g.kind,
      states: g.states.length,
      transitions: g.transitions.length,
    })),
    ...(marked ? { trace: marked } : {}),
  };
  printResult(values, summary, () => {
    const lines = written.map((path) => `wrote ${path}`);
    if (marked) {
      const used = Object.entries(marked.machines).map(
        ([kind, m]) => `${kind} ${m.transitions.reduce((sum, t) => sum + t.count, 0)}`,
      );
      lines.push(
        `trace ${marked.traceId}: ${marked.events} events from ${marked.hosts.join(', ')}; ` +
          `transitions taken: ${used.join(', ') || 'none'}`,
      );
    }
    return lines.join('\n');
  });
  if (marked && marked.unmatched.length > 0) {
    writeHuman(
      process.stderr,
      `agentbridge: ${marked.unmatched.length} kind(s) of recorded step match no transition of the current machines ` +
        '(a log from an older version?); they are listed on the page',
    );
  }
  return 0;
}

function markTrace(traceId: string, logs: string[], graphs: MachineGraph[]): PageTrace {
  if (traceId === '') throw new BridgeError(ErrorCode.badRequest, '--trace needs a trace id');
  if (logs.length === 0) {
    throw new BridgeError(
      ErrorCode.badRequest,
      "viz --trace needs one or more event logs: gateways' events.db files or `agentbridge export` files, e.g. " +
        'agentbridge viz --trace ID alpha.ndjson beta/events.db',
    );
  }
  for (const path of logs) {
    let isFile: boolean;
    try {
      isFile = statSync(path).isFile();
    } catch (err) {
      throw new BridgeError(ErrorCode.badRequest, `cannot read ${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (!isFile) {
      throw new BridgeError(
        ErrorCode.badRequest,
        `${path} is not a file: give a gateway's events.db or an \`agentbridge export\` file`,
      );
    }
  }
  const marker = new TraceMarker(traceId, graphs);
  const summary = replayTrace({
    sources: logs,
    traceId,
    check: false,
    onEvent: (event) => marker.add(event),
  });
  if (summary.events === 0) {
    throw new BridgeError(
      ErrorCode.badRequest,
      `no events of trace ${traceId} in ${logs.join(', ')}: check the trace id (tool results, ` +
        '`agentbridge send --json` and `agentbridge replay` show it)',
    );
  }
  return { marks: marker.result(), hosts: summary.hosts };
}

/** The marks as plain JSON: per machine, the transitions taken with their counts. */
function traceSummary(trace: PageTrace, graphs: MachineGraph[]) {
  const { marks } = trace;
  const machines: Record<
    string,
    { created: number; transitions: { from: string; event: string; to: string; count: number }[] }
  > = {};
  for (const graph of graphs) {
    const m = marks.machines.get(graph.kind);
    if (!m) continue;
    machines[graph.kind] = {
      created: m.created,
      transitions: graph.transitions
        .filter((t) => m.transitions.has(t.id))
        .map((t) => ({ from: t.source, event: t.event, to: t.target, count: m.transitions.get(t.id) ?? 0 })),
    };
  }
  return {
    traceId: marks.traceId,
    hosts: trace.hosts,
    events: marks.events,
    machines,
    unmatched: marks.unmatched,
  };
}
