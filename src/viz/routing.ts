import { type Box, center, contains, inflate, overlapArea, type Point, quadAt } from './geometry.js';
import { font, type LabelOf, loopBulge, loopReach, loopSlot, type Placement, textWidth } from './layout.js';
import { type GraphTransition, isWithin, type MachineGraph } from './machineGraph.js';

/** One transition as drawn: an SVG path (arrowhead at its end) and where its label goes. */
export interface RoutedEdge {
  readonly transition: GraphTransition;
  readonly path: string;
  readonly label: Box;
  /** Points along the path, for the picture's bounds. */
  readonly extent: readonly Point[];
}

const parallelGap = 20;
const detourStep = 36;
const detourTries = 8;
const labelHeight = font.lineHeight;
// From the middle outwards: the first spot along the curve that is free.
const labelSpots = [0.5, 0.44, 0.56, 0.38, 0.62, 0.32, 0.68, 0.26, 0.74, 0.2, 0.8, 0.15, 0.85];
const labelShifts = [0, -1, 1, -2, 2].map((k) => k * (labelHeight + 2));

/**
 * Routes every transition between the placed states. A transition is a quadratic curve from a
 * port on its source's border to one on its target's: each end takes the side facing the
 * other state (left or right between columns, top or bottom within one), and the ends on one
 * side are spread along it in the order of where they come from, so arrows into a busy state
 * land apart and do not cross on the way in. A transition that would cross an unrelated state
 * bends, one step at a time, until it clears them all (or the steps run out and it stays as it
 * was). A self-loop is a small loop above or below its state, in the room the layout kept.
 * Labels sit on their curve, slid along it to the first spot that covers no state and no
 * other label.
 */
export function routeEdges(graph: MachineGraph, placement: Placement, labelOf: LabelOf): RoutedEdge[] {
  const boxOf = (id: string): Box => placement.boxes.get(id) as Box;
  const placedLabels: Box[] = [];
  const routed = new Map<string, RoutedEdge>();

  const loops = graph.transitions.filter((t) => t.source === t.target);
  for (const t of loops) {
    const index = loops.filter((l) => l.source === t.source).indexOf(t);
    const edge = routeLoop(t, boxOf(t.source), index, labelOf(t));
    placedLabels.push(edge.label);
    routed.set(t.id, edge);
  }

  const between = graph.transitions.filter((t) => t.source !== t.target);
  const ports = assignPorts(between, boxOf);
  const pairKey = (t: GraphTransition): string => [t.source, t.target].sort().join('\u0000');
  for (const t of between) {
    const siblings = between.filter((o) => pairKey(o) === pairKey(t));
    const base = (siblings.indexOf(t) - (siblings.length - 1) / 2) * parallelGap;
    const related = (id: string): boolean =>
      isWithin(t.source, id) || isWithin(t.target, id) || isWithin(id, t.source) || isWithin(id, t.target);
    const obstacles = graph.states.filter((s) => !related(s.id)).map((s) => inflate(boxOf(s.id), 6));
    const start = ports.get(`${t.id}>`) as Point;
    const end = ports.get(`${t.id}<`) as Point;
    // Ports of one pair's transitions run top to bottom (left to right within a column) in
    // definition order at both ends; bending the first up (left) and the last down (right)
    // keeps them apart, whichever way each goes.
    const across =
      sideFacing(boxOf(t.source), boxOf(t.target)) === 'right' ||
      sideFacing(boxOf(t.source), boxOf(t.target)) === 'left';
    const curve = bendAround(start, end, base, across ? { x: 0, y: 1 } : { x: 1, y: 0 }, obstacles);
    const text = labelOf(t);
    const w = textWidth(text) + 8;
    // Labels keep off every state but the ones the transition lies inside.
    const container = (id: string): boolean => isWithin(t.source, id) && isWithin(t.target, id);
    const blocked = graph.states.filter((s) => !container(s.id)).map((s) => boxOf(s.id));
    const spot = (at: number, shift: number): Box => {
      const p = quadAt(curve.start, curve.control, curve.end, at);
      return { x: p.x - w / 2, y: p.y - labelHeight / 2 + shift, w, h: labelHeight };
    };
    // The first free spot; failing that, the one that covers least.
    const covered = (box: Box): number =>
      [...placedLabels, ...blocked].reduce((sum, o) => sum + overlapArea(inflate(box, 2), o), 0);
    // On the curve if there is room; else just above or below it (short, crowded transitions).
    const spots = labelShifts.flatMap((shift) => labelSpots.map((at) => spot(at, shift)));
    const label =
      spots.find((box) => covered(box) === 0) ??
      spots.reduce((best, box) => (covered(box) < covered(best) ? box : best));
    placedLabels.push(label);
    routed.set(t.id, {
      transition: t,
      path: `M${fmt(curve.start)} Q${fmt(curve.control)} ${fmt(curve.end)}`,
      label,
      extent: samples(curve.start, curve.control, curve.end),
    });
  }
  return graph.transitions.map((t) => routed.get(t.id) as RoutedEdge);
}

type Side = 'left' | 'right' | 'top' | 'bottom';

/**
 * Where each transition leaves its source (`<id>>`) and reaches its target (`<id><`). Ends on
 * one side of a state are spaced evenly along it, ordered by the other state's position (and,
 * between the same two states, by definition order at both ends, so they run side by side).
 */
function assignPorts(
  transitions: readonly GraphTransition[],
  boxOf: (id: string) => Box,
): Map<string, Point> {
  const ends = new Map<string, { key: string; other: Point; order: number }[]>();
  transitions.forEach((t, order) => {
    for (const [own, other, key] of [
      [t.source, t.target, `${t.id}>`],
      [t.target, t.source, `${t.id}<`],
    ] as const) {
      const side = sideFacing(boxOf(own), boxOf(other));
      const list = ends.get(`${own}\u0000${side}`) ?? [];
      list.push({ key, other: center(boxOf(other)), order });
      ends.set(`${own}\u0000${side}`, list);
    }
  });
  const ports = new Map<string, Point>();
  for (const [where, list] of ends) {
    const [state, side] = where.split('\u0000') as [string, Side];
    const box = boxOf(state);
    const across = side === 'left' || side === 'right';
    list.sort((a, b) => (across ? a.other.y - b.other.y : a.other.x - b.other.x) || a.order - b.order);
    list.forEach(({ key }, i) => {
      const f = (i + 1) / (list.length + 1);
      const x = side === 'left' ? box.x : side === 'right' ? box.x + box.w : box.x + f * box.w;
      const y = side === 'top' ? box.y : side === 'bottom' ? box.y + box.h : box.y + f * box.h;
      ports.set(key, { x, y });
    });
  }
  return ports;
}

/** The side of `own` that faces `other`: left or right unless they share a column. */
function sideFacing(own: Box, other: Box): Side {
  const apart = own.x + own.w < other.x || other.x + other.w < own.x;
  if (apart) return other.x > own.x ? 'right' : 'left';
  return other.y > own.y ? 'bottom' : 'top';
}

interface Curve {
  start: Point;
  control: Point;
  end: Point;
}

/**
 * The curve from `start` to `end` with the least bend that crosses no obstacle, starting from
 * `base` (positive bends towards `towards`).
 */
function bendAround(start: Point, end: Point, base: number, towards: Point, obstacles: Box[]): Curve {
  const dx = end.x - start.x;
  const dy = end.y - start.y;
  const length = Math.hypot(dx, dy) || 1;
  const flip = -dy * towards.x + dx * towards.y < 0 ? -1 : 1;
  const normal = { x: (flip * -dy) / length, y: (flip * dx) / length };
  const mid = { x: (start.x + end.x) / 2, y: (start.y + end.y) / 2 };
  const toward = base < 0 ? -1 : 1;
  const offsets = [base];
  for (let i = 1; i <= detourTries; i++)
    offsets.push(base + toward * i * detourStep, base - toward * i * detourStep);
  // The curve's apex is half way to its control point.
  const curveAt = (offset: number): Curve => ({
    start,
    control: { x: mid.x + normal.x * 2 * offset, y: mid.y + normal.y * 2 * offset },
    end,
  });
  for (const offset of offsets) {
    const curve = curveAt(offset);
    const points = samples(curve.start, curve.control, curve.end);
    if (!points.some((p) => obstacles.some((o) => contains(o, p)))) return curve;
  }
  return curveAt(base);
}

function routeLoop(t: GraphTransition, box: Box, index: number, text: string): RoutedEdge {
  const { side, ring } = loopSlot(index);
  const bulge = loopBulge(ring);
  const cx = box.x + box.w / 2;
  const y = side === -1 ? box.y : box.y + box.h;
  const reach = y + side * bulge;
  const path = `M${fmt({ x: cx - 10, y })} C${fmt({ x: cx - 30, y: reach })} ${fmt({ x: cx + 30, y: reach })} ${fmt({ x: cx + 10, y })}`;
  const w = textWidth(text) + 8;
  // The label sits just beyond the loop's apex (three quarters of the way to its controls).
  const outer = y + side * loopReach(ring);
  const label = { x: cx - w / 2, y: side === -1 ? outer : outer - labelHeight, w, h: labelHeight };
  return {
    transition: t,
    path,
    label,
    extent: [
      { x: cx - 30, y: reach },
      { x: cx + 30, y: reach },
    ],
  };
}

function samples(a: Point, c: Point, b: Point): Point[] {
  const points: Point[] = [];
  for (let i = 1; i < 20; i++) points.push(quadAt(a, c, b, i / 20));
  return points;
}

function fmt(p: Point): string {
  return `${round(p.x)},${round(p.y)}`;
}

/** One decimal: enough for a picture, and the output stays byte-for-byte deterministic. */
export function round(n: number): number {
  return Math.round(n * 10) / 10;
}
