import type { Box, Point } from './geometry.js';
import {
  type GraphState,
  type GraphTransition,
  isWithin,
  type MachineGraph,
  StateKind,
} from './machineGraph.js';

/** The text a diagram shows for a transition (its label, perhaps with a count). */
export type LabelOf = (t: GraphTransition) => string;

/**
 * Where the states of a machine go: a layered layout, left to right, done for the machine and
 * again inside each compound state. A state's column is its breadth-first distance from the
 * initial state over the transitions between siblings (a transition into or out of a nested
 * state counts for the sibling holding it); final states share the last column, so a flow reads
 * left to right and ends on the right. Left to right because labels are wide and short: on
 * mostly horizontal arrows they stack instead of colliding, and each gap between columns is
 * made as wide as the labels that cross it. Within a column, states are ordered by where their
 * neighbours to the left are (one barycentre sweep), which undoes most crossings here.
 */
export interface Placement {
  /** Every state's box, by state id. */
  readonly boxes: ReadonlyMap<string, Box>;
  /** One initial marker per machine and compound state: the dot and the box it points at. */
  readonly initials: readonly { container: string | null; dot: Point; state: string }[];
}

/** Text metrics of the monospace font the page uses: a label's size is known before drawing. */
export const font = { size: 12, charWidth: 7.3, lineHeight: 16 } as const;

export function textWidth(text: string): number {
  return text.length * font.charWidth;
}

const stateHeight = 36;
const minStateWidth = 84;
const rowGap = 72;
/** The least room between two arrowheads on one side of a state. */
const portPitch = 10;
const minColumnGap = 72;
const compoundPad = 18;
const compoundHeader = 28;
/** Room left of a first-column state for the initial dot and its arrow. */
const initialRoom = 36;

/** Self-loops alternate above (-1) and below (1) their state; outer rings bulge further. */
export function loopSlot(index: number): { side: 1 | -1; ring: number } {
  return { side: index % 2 === 0 ? -1 : 1, ring: Math.floor(index / 2) };
}

export function loopBulge(ring: number): number {
  return 30 + 28 * ring;
}

/** How far a loop's label reaches from its state's edge. */
export function loopReach(ring: number): number {
  return loopBulge(ring) * 0.75 + 4 + font.lineHeight;
}

interface Block {
  w: number;
  h: number;
  /** Children's boxes relative to the block, and every descendant's, relative too. */
  boxes: Map<string, Box>;
  initials: { container: string | null; dot: Point; state: string }[];
}

export function placeStates(graph: MachineGraph, labelOf: LabelOf): Placement {
  const block = layoutBlock(graph, null, labelOf);
  return { boxes: block.boxes, initials: block.initials };
}

function layoutBlock(graph: MachineGraph, parent: GraphState | null, labelOf: LabelOf): Block {
  const children = graph.states.filter((s) => s.parent === (parent?.id ?? null));
  const initial = parent ? parent.initial : graph.initial;
  const { columns, links } = levels(graph, children, initial);
  const columnOf = new Map<string, number>();
  columns.forEach((column, i) => {
    for (const id of column) columnOf.set(id, i);
  });
  // A state that many transitions reach from one side gets taller, so their arrowheads
  // land apart (see the ports in routing.ts).
  const ends = (id: string, side: -1 | 1): number =>
    links.filter(({ from, to }) => {
      const other = from === id ? to : to === id ? from : undefined;
      return (
        other !== undefined &&
        other !== id &&
        Math.sign((columnOf.get(other) ?? 0) - (columnOf.get(id) ?? 0)) === side
      );
    }).length;
  const inner = new Map<string, Block>();
  const size = new Map<string, { w: number; h: number }>();
  for (const child of children) {
    if (child.kind === StateKind.compound) {
      const nested = layoutBlock(graph, child, labelOf);
      inner.set(child.id, nested);
      const w = Math.max(nested.w, textWidth(child.name) + 24) + 2 * compoundPad;
      size.set(child.id, { w, h: nested.h + compoundHeader + compoundPad });
    } else {
      const h = Math.max(stateHeight, portPitch * Math.max(ends(child.id, -1), ends(child.id, 1)));
      size.set(child.id, { w: Math.max(minStateWidth, textWidth(child.name) + 28), h });
    }
  }
  const margins = loopMargins(graph, children, labelOf);
  const marginOf = (id: string) => margins.get(id) ?? { top: 0, bottom: 0, wide: 0 };
  const sizeOf = (id: string) => size.get(id) as { w: number; h: number };

  const columnWidth = columns.map((column) =>
    Math.max(...column.map((id) => Math.max(sizeOf(id).w, marginOf(id).wide))),
  );
  const columnHeight = columns.map(
    (column) =>
      column.reduce((sum, id) => sum + marginOf(id).top + sizeOf(id).h + marginOf(id).bottom, 0) +
      rowGap * Math.max(0, column.length - 1),
  );
  // Each gap as wide as the widest label of a transition between its two columns.
  const gaps = columns.slice(1).map((_, i) => {
    const crossing = links.filter(({ from, to }) => {
      const [a, b] = [columnOf.get(from) ?? 0, columnOf.get(to) ?? 0].sort((p, q) => p - q);
      return a === i && b === i + 1;
    });
    return Math.max(minColumnGap, ...crossing.map(({ t }) => textWidth(labelOf(t)) + 48));
  });
  const height = Math.max(0, ...columnHeight);
  const boxes = new Map<string, Box>();
  let x = initial ? initialRoom : 0;
  columns.forEach((column, i) => {
    let y = (height - (columnHeight[i] ?? 0)) / 2;
    const width = columnWidth[i] ?? 0;
    for (const id of column) {
      const s = sizeOf(id);
      y += marginOf(id).top;
      boxes.set(id, { x: x + (width - s.w) / 2, y, w: s.w, h: s.h });
      y += s.h + marginOf(id).bottom + rowGap;
    }
    x += width + (gaps[i] ?? 0);
  });
  const block: Block = { w: x, h: height, boxes, initials: [] };

  // Nested blocks move inside their compound state's box.
  for (const [id, nested] of inner) {
    const box = boxes.get(id) as Box;
    const dx = box.x + (box.w - nested.w) / 2;
    const dy = box.y + compoundHeader;
    for (const [childId, b] of nested.boxes) boxes.set(childId, { ...b, x: b.x + dx, y: b.y + dy });
    for (const marker of nested.initials) {
      block.initials.push({ ...marker, dot: { x: marker.dot.x + dx, y: marker.dot.y + dy } });
    }
  }
  const first = initial ? boxes.get(initial) : undefined;
  if (initial && first) {
    block.initials.push({
      container: parent?.id ?? null,
      dot: { x: first.x - initialRoom + 8, y: first.y + Math.min(first.h / 2, stateHeight / 2) },
      state: initial,
    });
  }
  return block;
}

interface Link {
  /** The siblings holding the transition's ends. */
  from: string;
  to: string;
  t: GraphTransition;
}

/** The children by column, each column in layout order, and the links between them. */
function levels(
  graph: MachineGraph,
  children: readonly GraphState[],
  initial: string | null,
): { columns: string[][]; links: Link[] } {
  const ids = children.map((c) => c.id);
  const sibling = (stateId: string): string | undefined => ids.find((id) => isWithin(stateId, id));
  const links: Link[] = [];
  for (const t of graph.transitions) {
    const from = sibling(t.source);
    const to = sibling(t.target);
    if (from && to) links.push({ from, to, t });
  }
  const level = new Map<string, number>();
  const isFinal = (id: string): boolean => children.find((c) => c.id === id)?.kind === StateKind.final;
  const queue = initial && ids.includes(initial) ? [initial] : ids.slice(0, 1);
  for (const id of queue) level.set(id, 0);
  while (queue.length > 0) {
    const id = queue.shift() as string;
    if (isFinal(id)) continue;
    for (const { from, to } of links) {
      if (from === id && !level.has(to)) {
        level.set(to, (level.get(id) ?? 0) + 1);
        queue.push(to);
      }
    }
  }
  const open = ids.filter((id) => !isFinal(id));
  const deepest = Math.max(0, ...open.map((id) => level.get(id) ?? 0));
  // Unreachable from the initial state (not the case today): a column of their own.
  const unreached = open.some((id) => !level.has(id));
  for (const id of open) if (!level.has(id)) level.set(id, deepest + 1);
  const last = deepest + (unreached ? 2 : 1);
  for (const id of ids) if (isFinal(id)) level.set(id, last);

  const sparse: string[][] = [];
  for (const [id, n] of level) sparse[n] = [...(sparse[n] ?? []), id];
  const columns = sparse.filter((column) => column !== undefined);
  for (let c = 1; c < columns.length; c++) {
    const position = new Map<string, number>();
    for (const left of columns.slice(0, c)) {
      for (const [i, id] of left.entries()) position.set(id, (i + 0.5) / left.length);
    }
    const column = columns[c] as string[];
    const key = new Map<string, number>();
    column.forEach((id, i) => {
      const near = links
        .flatMap(({ from, to }) => (from === id ? [to] : to === id ? [from] : []))
        .map((other) => position.get(other))
        .filter((p): p is number => p !== undefined);
      key.set(
        id,
        near.length > 0 ? near.reduce((sum, p) => sum + p, 0) / near.length : (i + 0.5) / column.length,
      );
    });
    column.sort((a, b) => (key.get(a) ?? 0) - (key.get(b) ?? 0));
  }
  return { columns, links };
}

/** Room to keep above and below each state for its self-loops, and how wide their labels are. */
function loopMargins(
  graph: MachineGraph,
  children: readonly GraphState[],
  labelOf: LabelOf,
): Map<string, { top: number; bottom: number; wide: number }> {
  const margins = new Map<string, { top: number; bottom: number; wide: number }>();
  for (const child of children) {
    const loops = graph.transitions.filter((t) => t.source === child.id && t.target === child.id);
    const m = { top: 0, bottom: 0, wide: 0 };
    loops.forEach((t, i) => {
      const { side, ring } = loopSlot(i);
      if (side === -1) m.top = Math.max(m.top, loopReach(ring) + 4);
      else m.bottom = Math.max(m.bottom, loopReach(ring) + 4);
      m.wide = Math.max(m.wide, textWidth(labelOf(t)) + 8);
    });
    margins.set(child.id, m);
  }
  return margins;
}
