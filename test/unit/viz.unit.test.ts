import { describe, expect, it } from 'vitest';
import { type AnyStateMachine, createMachine } from 'xstate';
import { initEvent } from '../../src/kernel/parseRecordedEvent.js';
import { pureInitialTransition, pureTransition } from '../../src/kernel/pureTransition.js';
import { stateName } from '../../src/kernel/stateName.js';
import { actorKinds, machines } from '../../src/machines/index.js';
import { overlapArea } from '../../src/viz/geometry.js';
import { renderHtml } from '../../src/viz/html.js';
import { placeStates } from '../../src/viz/layout.js';
import { machineGraph } from '../../src/viz/machineGraph.js';
import { renderMermaid } from '../../src/viz/mermaid.js';
import { renderSvg } from '../../src/viz/svg.js';
import { type RecordedTransition, TraceMarker } from '../../src/viz/traceMarks.js';
import { registryGraphs } from '../../src/viz/vizFiles.js';
import { graphEdges } from '../support/machineCoverage.js';

const graphs = registryGraphs();
const graphOf = (kind: string) => graphs.find((g) => g.kind === kind)!;

/** The log rows an actor would write for these events: its creation, then each transition. */
function record(
  kind: string,
  machine: AnyStateMachine,
  input: unknown,
  events: { type: string }[],
): RecordedTransition[] {
  let [snapshot] = pureInitialTransition(machine, input);
  const rows: RecordedTransition[] = [
    { actorKind: kind, event: initEvent, fromState: null, toState: stateName(snapshot.value) },
  ];
  for (const event of events) {
    const from = stateName(snapshot.value);
    [snapshot] = pureTransition(machine, snapshot, event);
    rows.push({ actorKind: kind, event: event.type, fromState: from, toState: stateName(snapshot.value) });
  }
  return rows;
}

const entityInput = { gid: 'g1', name: 'w', kind: 'worker', host: 'h', groups: [], mode: 'inject' };

describe('the machine graph', () => {
  it('has every machine of the registry, each edge of its XState graph, and root transitions once per open top-level state', () => {
    expect(graphs.map((g) => g.kind)).toEqual(actorKinds);
    for (const graph of graphs) {
      const machine = machines[graph.kind as keyof typeof machines].machine as AnyStateMachine;
      const edges = graphEdges(machine);
      const open = graph.states.filter((s) => s.parent === null && s.kind !== 'final').length;
      const expected = edges.reduce((n, e) => n + (e.source.parent ? 1 : open), 0);
      expect(graph.transitions, graph.kind).toHaveLength(expected);
      for (const edge of edges) {
        expect(
          graph.transitions.some((t) => t.event === edge.transition.eventType),
          graph.kind,
        ).toBe(true);
      }
    }
  });

  it('keeps nested states, initial states, final states and the machine-level transition of the entity', () => {
    const entity = graphOf('entity');
    expect(entity.initial).toBe('registered');
    expect(entity.states.map((s) => [s.id, s.parent, s.kind])).toEqual([
      ['registered', null, 'atomic'],
      ['active', null, 'compound'],
      ['active.idle', 'active', 'atomic'],
      ['active.busy', 'active', 'atomic'],
      ['gone', null, 'final'],
    ]);
    expect(entity.states.find((s) => s.id === 'active')?.initial).toBe('active.idle');
    const deregistered = entity.transitions.filter((t) => t.event === 'entity.deregistered');
    expect(deregistered.map((t) => [t.source, t.target, t.fromRoot])).toEqual([
      ['registered', 'gone', true],
      ['active', 'gone', true],
    ]);
  });

  it('labels delayed, guarded and internal transitions readably', () => {
    const labels = (kind: string) =>
      graphOf(kind).transitions.map((t) => `${t.source} ${t.label} ${t.target}`);
    expect(labels('delivery')).toContain('pending after untilDeadline dead-lettered');
    expect(labels('delivery')).toContain('pending delivery.inject [isInjectMode] injecting');
    expect(labels('delivery')).toContain('injecting delivery.injectFailed [canRetry] backoff');
    expect(labels('spawn')).toContain('running spawn.answered (internal) running');
    // A parameterized guard is labelled with its parameters.
    expect(labels('send')).toContain('confirmed send.receipt [isReceipt(handed-over)] handed-over');
    const after = graphOf('turn').transitions.find((t) => t.label === 'after untilDeadline');
    expect(after?.event).toBe('xstate.after.untilDeadline.turn.waiting');
  });

  it('follows the definition: a changed machine draws differently', () => {
    const config = machines.send.machine.config;
    // `submitted` stops being final and can go back: both show, with nothing written by hand.
    const changed = createMachine({
      ...config,
      states: { ...config.states, submitted: { on: { 'send.reopened': { target: 'accepted' } } } },
    } as unknown as Parameters<typeof createMachine>[0]);
    const lines = renderMermaid(machineGraph('send', changed)).split('\n');
    expect(lines).toContain('  submitted --> accepted : send.reopened');
    expect(lines).not.toContain('  submitted --> [*]');
    expect(renderMermaid(graphOf('send')).split('\n')).toContain('  submitted --> [*]');
  });
});

describe('the Mermaid diagram', () => {
  it('nests compound states, marks initial and final states, and labels every transition', () => {
    const text = renderMermaid(graphOf('entity'));
    expect(text).toMatch(/^---\ntitle: entity\n---\nstateDiagram-v2\n/);
    for (const line of [
      '  [*] --> registered',
      '  state active {',
      '    [*] --> active_idle',
      '    state "idle" as active_idle',
      '    active_idle --> active_busy : entity.busy',
      '    active_busy --> active_idle : entity.idle',
      '  registered --> active : entity.activated',
      '  active --> registered : actor.rehydrated',
      '  registered --> gone : entity.deregistered',
      '  active --> gone : entity.deregistered',
      '  gone --> [*]',
    ]) {
      expect(text.split('\n')).toContain(line);
    }
  });

  it('draws a machine-level transition from every open state, never from a final one', () => {
    const lines = renderMermaid(graphOf('remind')).split('\n');
    for (const from of ['quiet', 'waiting', 'nudging'])
      expect(lines).toContain(`  ${from} --> ended : remind.ended`);
    expect(lines).not.toContain('  ended --> ended : remind.ended');
    expect(lines).toContain('  waiting --> nudging : after untilDue');
  });

  it('gives Mermaid ids without dashes to states that have them', () => {
    const lines = renderMermaid(graphOf('delivery')).split('\n');
    expect(lines).toContain('  state "dead-lettered" as dead_lettered');
    expect(lines).toContain('  pending --> dead_lettered : after untilDeadline');
    expect(lines).toContain('  dead_lettered --> [*]');
  });
});

describe('marking a flow', () => {
  const marker = new TraceMarker('t1', graphs);
  const rows = [
    ...record('entity', machines.entity.machine, entityInput, [
      { type: 'entity.activated' },
      { type: 'entity.busy' },
      { type: 'entity.idle' },
      { type: 'entity.busy' },
      { type: 'entity.deregistered' },
    ]),
    ...record('delivery', machines.delivery.machine, deliveryInput(), [
      { type: 'xstate.after.untilDeadline.delivery.pending' },
    ]),
    { actorKind: 'send', event: 'send.vanished', fromState: 'accepted', toState: 'gone' },
    { actorKind: 'ghost', event: 'x', fromState: 'a', toState: 'b' },
  ];
  for (const row of rows) marker.add(row);
  const marks = marker.result();

  it('counts each transition taken, matching nested states to their parents and the machine', () => {
    const entity = marks.machines.get('entity')!;
    expect(entity.created).toBe(1);
    expect(Object.fromEntries(entity.transitions)).toEqual({
      'registered|entity.activated|active#0': 1,
      'active.idle|entity.busy|active.busy#0': 2,
      'active.busy|entity.idle|active.idle#0': 1,
      'active|entity.deregistered|gone#0': 1,
    });
    expect(entity.states.get('active')).toBe(4);
    expect(
      marks.machines
        .get('delivery')
        ?.transitions.get('pending|xstate.after.untilDeadline.delivery.pending|dead-lettered#0'),
    ).toBe(1);
    expect(marks.events).toBe(rows.length);
  });

  it('keeps what matches no transition, with counts', () => {
    expect(marks.unmatched).toEqual([
      { actorKind: 'send', event: 'send.vanished', fromState: 'accepted', toState: 'gone', count: 1 },
      { actorKind: 'ghost', event: 'x', fromState: 'a', toState: 'b', count: 1 },
    ]);
  });

  it('shows the counts in the Mermaid labels, the SVG edges and the page', () => {
    const entity = graphOf('entity');
    const mermaid = renderMermaid(entity, { traceId: 't1', marks: marks.machines.get('entity') });
    expect(mermaid).toContain('    active_idle --> active_busy : entity.busy (×2)');
    expect(mermaid).toContain('  [*] --> registered : created (×1)');
    expect(mermaid).toContain('  class registered taken');
    const svg = renderSvg(entity, { traceId: 't1', marks: marks.machines.get('entity') });
    expect(svg).toContain(
      'class="edge taken" data-transition="active.idle|entity.busy|active.busy#0" data-count="2"',
    );
    expect(svg).toContain('entity.busy ×2');
    const html = renderHtml(graphs, { marks, hosts: ['h'] });
    expect(html).toContain('<code>send.vanished</code> ×1');
  });
});

describe('the layout', () => {
  it('puts no state on another, and every nested state inside its parent', () => {
    for (const graph of graphs) {
      const { boxes } = placeStates(graph, (t) => t.label);
      for (const a of graph.states) {
        const box = boxes.get(a.id)!;
        if (a.parent) {
          const parent = boxes.get(a.parent)!;
          expect(box.x >= parent.x && box.x + box.w <= parent.x + parent.w, `${graph.kind} ${a.id}`).toBe(
            true,
          );
          expect(box.y >= parent.y && box.y + box.h <= parent.y + parent.h, `${graph.kind} ${a.id}`).toBe(
            true,
          );
        }
        for (const b of graph.states) {
          const nested = b.id.startsWith(`${a.id}.`) || a.id.startsWith(`${b.id}.`);
          if (a.id < b.id && !nested) {
            expect(overlapArea(box, boxes.get(b.id)!), `${graph.kind}: ${a.id} on ${b.id}`).toBe(0);
          }
        }
      }
    }
  });
});

function deliveryInput() {
  return {
    msgId: 'm1',
    traceId: 't1',
    recipient: 'r',
    sender: 's',
    mode: 'hold',
    acceptedAt: 0,
    deadline: 1000,
    maxAttempts: 3,
    retryBaseMs: 10,
    digest: 'd',
    size: 1,
  };
}
