import type { MachineGraph } from './machineGraph.js';
import { escapeXml, renderSvg } from './svg.js';
import type { TraceMarks } from './traceMarks.js';

/** A flow drawn on the page: its marks, and where they came from. */
export interface PageTrace {
  readonly marks: TraceMarks;
  readonly hosts: readonly string[];
}

/**
 * One self-contained page with every machine: inline SVG and an inline stylesheet, no script,
 * and a content security policy that lets the page load nothing at all, so it reads the same
 * offline, from a file, or attached to an issue. Deterministic (no dates): the committed copy
 * in docs/machines is compared byte for byte with what the code draws.
 */
export function renderHtml(graphs: readonly MachineGraph[], trace?: PageTrace): string {
  const title = trace ? `bridge state machines: trace ${trace.marks.traceId}` : 'bridge state machines';
  const sections = graphs.map((graph) => section(graph, trace));
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeXml(title)}</title>
<style>
${stylesheet}
</style>
</head>
<body${trace ? ' class="trace"' : ''}>
<h1>${escapeXml(title)}</h1>
<p class="about">Drawn by <code>agentbridge viz</code> from the machine definitions in <code>src/machines</code>.
A dot marks a machine's (or a nested state's) initial state, a double border a final state; a dashed
transition is declared on the machine itself and applies in every state it starts from.
<code>after X</code> is a delayed transition that fires when the delay <code>X</code> has passed.</p>
${trace ? traceSummary(trace, graphs) : ''}
<nav>${graphs.map((g) => `<a href="#machine-${escapeXml(g.kind)}">${escapeXml(g.kind)}</a>`).join(' · ')}</nav>
${sections.join('\n')}
</body>
</html>
`;
}

function section(graph: MachineGraph, trace: PageTrace | undefined): string {
  const marks = trace?.marks.machines.get(graph.kind);
  const svg = renderSvg(graph, trace ? { traceId: trace.marks.traceId, marks } : undefined);
  const rows = graph.transitions.map((t) => {
    const count = marks?.transitions.get(t.id) ?? 0;
    return (
      `<tr${count > 0 ? ' class="taken"' : ''}><td>${escapeXml(t.source)}</td><td><code>${escapeXml(t.event)}</code>` +
      `${t.label === t.event ? '' : ` (${escapeXml(t.label)})`}</td><td>${escapeXml(t.target)}</td>` +
      `${trace ? `<td>${count || ''}</td>` : ''}</tr>`
    );
  });
  const usage = trace
    ? `<p class="usage">${marks ? `${marks.created} created; ${sum(marks.transitions)} transitions taken` : 'not used by this flow'}</p>`
    : '';
  return `<section id="machine-${escapeXml(graph.kind)}">
<h2>${escapeXml(graph.kind)}</h2>
${usage}
<div class="diagram">
${svg}
</div>
<details><summary>${graph.states.length} states, ${graph.transitions.length} transitions</summary>
<table><thead><tr><th>from</th><th>event</th><th>to</th>${trace ? '<th>taken</th>' : ''}</tr></thead>
<tbody>
${rows.join('\n')}
</tbody></table></details>
</section>`;
}

function traceSummary(trace: PageTrace, graphs: readonly MachineGraph[]): string {
  const { marks } = trace;
  const used = graphs.filter((g) => marks.machines.has(g.kind)).map((g) => g.kind);
  const unmatched = marks.unmatched.map(
    (u) =>
      `<li><code>${escapeXml(u.actorKind)}</code> ${escapeXml(u.fromState ?? '(new)')} → ${escapeXml(u.toState)} on <code>${escapeXml(u.event)}</code> ×${u.count}</li>`,
  );
  return `<div class="summary">
<p>Trace <code>${escapeXml(marks.traceId)}</code>: ${marks.events} events from ${escapeXml(trace.hosts.join(', '))}, through ${escapeXml(used.join(', ') || 'no machine')}.
Transitions it took are drawn thick with their count (<span class="swatch"></span>); states it reached are filled.</p>
${unmatched.length > 0 ? `<p class="warn">Recorded steps the current machines have no transition for (a log from an older version?):</p><ul class="warn">${unmatched.join('')}</ul>` : ''}
</div>`;
}

function sum(counts: ReadonlyMap<string, number>): number {
  let total = 0;
  for (const n of counts.values()) total += n;
  return total;
}

/**
 * How a diagram from renderSvg looks: its states, transitions and a flow's marks (inside an
 * element of class `trace`, the transitions it did not take fade). Shared with the operator console.
 */
export const diagramStylesheet = `.diagram { overflow-x: auto; border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px; background: #fcfcfd; }
/* A wide machine (delivery) is drawn to the box's width, not cut at its edge. */
.diagram svg { display: block; max-width: 100%; height: auto; }
svg.machine { display: block; font-family: ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; }
.state .box { fill: #eef2ff; stroke: #4f46e5; stroke-width: 1.5; }
.state.compound .box { fill: #f8fafc; stroke: #64748b; }
.state.compound .name { font-weight: bold; }
.state.final .box { fill: #f1f5f9; stroke: #334155; }
.state.final .inner { fill: none; stroke: #334155; stroke-width: 1.2; }
.state .name { fill: #111827; }
.state.taken .box { fill: #fef3c7; stroke: #b45309; stroke-width: 2.5; }
.edge path { fill: none; stroke: #64748b; stroke-width: 1.3; }
.edge.from-root path { stroke-dasharray: 6 3; }
.trace .edge path { stroke: #cbd5e1; }
.trace .edge.taken path, .edge.taken path { stroke: #d97706; stroke-width: 3; }
marker.arrow path { fill: #64748b; }
.trace marker.arrow path { fill: #cbd5e1; }
marker.arrow.taken path, .trace marker.arrow.taken path { fill: #d97706; }
.label .bg { fill: #ffffff; fill-opacity: 0.92; }
.label .text { fill: #334155; }
.label.taken .bg { fill: #fffbeb; stroke: #d97706; }
.label.taken .text { fill: #92400e; font-weight: bold; }
.initial circle { fill: #111827; }
.initial path { stroke: #111827; stroke-width: 1.3; fill: none; }
.initial.taken path { stroke: #d97706; stroke-width: 3; }
.initial .count { fill: #92400e; font-weight: bold; }
.swatch { display: inline-block; width: 24px; height: 4px; background: #d97706; vertical-align: middle; }`;

const stylesheet = `body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1f2937; background: #fff; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin: 28px 0 6px; }
code { font-family: ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12.5px; }
nav a { margin: 0 2px; }
${diagramStylesheet}
table { border-collapse: collapse; margin: 6px 0; } td, th { border: 1px solid #e5e7eb; padding: 2px 8px; text-align: left; }
tr.taken td { background: #fef3c7; }
.warn { color: #b91c1c; }`;
