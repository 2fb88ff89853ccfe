import { type Box, bounds, center } from './geometry.js';
import { type LabelOf, placeStates, textWidth } from './layout.js';
import { type GraphState, type MachineGraph, StateKind } from './machineGraph.js';
import type { DiagramTrace } from './mermaid.js';
import { type RoutedEdge, round, routeEdges } from './routing.js';

const margin = 16;

/**
 * The machine as an inline SVG: boxes for states (compound ones holding their children, final
 * ones with a double border), a dot and arrow for each initial state, a labelled arrow per
 * transition. With a trace, the transitions it took are drawn `taken` with their count and
 * the states it reached are filled; the page's stylesheet gives the classes their look.
 */
export function renderSvg(graph: MachineGraph, trace?: DiagramTrace): string {
  const marks = trace?.marks;
  const countOf = (id: string): number => marks?.transitions.get(id) ?? 0;
  const labelOf: LabelOf = (t) => (countOf(t.id) > 0 ? `${t.label} ×${countOf(t.id)}` : t.label);
  const placement = placeStates(graph, labelOf);
  const edges = routeEdges(graph, placement, labelOf);
  const boxOf = (id: string): Box => placement.boxes.get(id) as Box;
  const created = marks?.created ?? 0;

  const initialLabel = (container: string | null): string | null =>
    container === null && created > 0 ? `created ×${created}` : null;
  const extent = bounds([
    ...placement.boxes.values(),
    ...edges.map((e) => e.label),
    ...edges.flatMap((e) => e.extent.map((p) => ({ x: p.x, y: p.y, w: 0, h: 0 }))),
    ...placement.initials.map(({ dot }) => ({ x: dot.x - 6, y: dot.y - 6, w: 12, h: 12 })),
    ...placement.initials.flatMap(({ dot, container }) => {
      const label = initialLabel(container);
      // Left of the dot, clear of the initial state's loops and labels.
      return label ? [{ x: dot.x - 10 - textWidth(label), y: dot.y - 8, w: textWidth(label), h: 16 }] : [];
    }),
  ]);
  const view = {
    x: extent.x - margin,
    y: extent.y - margin,
    w: extent.w + 2 * margin,
    h: extent.h + 2 * margin,
  };
  const arrow = `arrow-${graph.kind}`;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" class="machine" role="img" aria-label="${escapeXml(`${graph.kind} state machine`)}" ` +
      `width="${round(view.w)}" height="${round(view.h)}" viewBox="${round(view.x)} ${round(view.y)} ${round(view.w)} ${round(view.h)}">`,
    '<defs>',
    marker(arrow, 'arrow'),
    marker(`${arrow}-taken`, 'arrow taken'),
    '</defs>',
  ];

  const stateGroup = (state: GraphState): string => {
    const box = boxOf(state.id);
    const reached = marks?.states.get(state.id) ?? 0;
    const classes = ['state', state.kind, ...(reached > 0 ? ['taken'] : [])].join(' ');
    const title = `${state.id} (${state.kind})${reached > 0 ? `: reached ${reached}×` : ''}`;
    const parts = [
      `<g class="${classes}" data-state="${escapeXml(state.id)}">`,
      `<title>${escapeXml(title)}</title>`,
      rect(box, 'box', state.kind === StateKind.compound ? 10 : 8),
    ];
    if (state.kind === StateKind.final) parts.push(rect(insetBox(box, 4), 'inner', 5));
    const c = center(box);
    parts.push(
      state.kind === StateKind.compound
        ? text(box.x + 12, box.y + 14, state.name, 'name', 'start')
        : text(c.x, c.y, state.name, 'name', 'middle'),
      '</g>',
    );
    return parts.join('');
  };

  const compound = graph.states.filter((s) => s.kind === StateKind.compound);
  const simple = graph.states.filter((s) => s.kind !== StateKind.compound);
  out.push('<g class="states compound">', ...compound.map(stateGroup), '</g>');
  out.push('<g class="edges">', ...edges.map((e) => edgePath(e, countOf(e.transition.id), arrow)), '</g>');
  out.push('<g class="states">', ...simple.map(stateGroup), '</g>');
  out.push(
    '<g class="labels">',
    ...edges.map((e) => edgeLabel(e, labelOf, countOf(e.transition.id))),
    '</g>',
  );
  out.push('<g class="initials">');
  for (const { dot, state, container } of placement.initials) {
    const left = boxOf(state).x;
    const label = initialLabel(container);
    out.push(
      `<g class="initial${label ? ' taken' : ''}" data-initial="${escapeXml(container ?? graph.kind)}">`,
      `<circle cx="${round(dot.x)}" cy="${round(dot.y)}" r="5"/>`,
      `<path d="M${round(dot.x + 5)},${round(dot.y)} L${round(left)},${round(dot.y)}" marker-end="url(#${label ? `${arrow}-taken` : arrow})"/>`,
      label ? text(dot.x - 10, dot.y, label, 'count', 'end') : '',
      '</g>',
    );
  }
  out.push('</g>', '</svg>');
  return out.join('\n');
}

function edgePath(edge: RoutedEdge, count: number, arrow: string): string {
  const t = edge.transition;
  const classes = ['edge', ...(count > 0 ? ['taken'] : []), ...(t.fromRoot ? ['from-root'] : [])].join(' ');
  const title = `${t.source} → ${t.target} on ${t.event}${t.fromRoot ? ' (declared on the machine: from any state)' : ''}${count > 0 ? `; taken ${count}×` : ''}`;
  return (
    `<g class="${classes}" data-transition="${escapeXml(t.id)}" data-count="${count}">` +
    `<title>${escapeXml(title)}</title>` +
    `<path d="${edge.path}" marker-end="url(#${count > 0 ? `${arrow}-taken` : arrow})"/></g>`
  );
}

function edgeLabel(edge: RoutedEdge, labelOf: LabelOf, count: number): string {
  const { label, transition } = edge;
  return (
    `<g class="label${count > 0 ? ' taken' : ''}" data-transition="${escapeXml(transition.id)}">` +
    rect(label, 'bg', 3) +
    text(label.x + label.w / 2, label.y + label.h / 2, labelOf(transition), 'text', 'middle') +
    '</g>'
  );
}

function marker(id: string, className: string): string {
  return (
    `<marker id="${escapeXml(id)}" class="${className}" viewBox="0 0 10 10" refX="10" refY="5" ` +
    'markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>'
  );
}

function rect(box: Box, className: string, radius: number): string {
  return `<rect class="${className}" x="${round(box.x)}" y="${round(box.y)}" width="${round(box.w)}" height="${round(box.h)}" rx="${radius}"/>`;
}

function insetBox(box: Box, by: number): Box {
  return { x: box.x + by, y: box.y + by, w: box.w - 2 * by, h: box.h - 2 * by };
}

function text(
  x: number,
  y: number,
  content: string,
  className: string,
  anchor: 'start' | 'middle' | 'end',
): string {
  return `<text class="${className}" x="${round(x)}" y="${round(y)}" text-anchor="${anchor}" dominant-baseline="central">${escapeXml(content)}</text>`;
}

export function escapeXml(value: string): string {
  return value
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}
