import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AnyMachineSnapshot } from 'xstate';
import { initEvent, parseRecordedEvent, type Upcasts, upcasts } from '../../src/kernel/parseRecordedEvent.js';
import { pureInitialTransition, pureTransition } from '../../src/kernel/pureTransition.js';
import { stateName } from '../../src/kernel/stateName.js';
import { actorKinds, machines } from '../../src/machines/index.js';
import type { EventRow } from '../../src/store/eventRow.js';
import { delayedEvents, walks } from '../support/machineWalks.js';

/** A row as ActorCell records an event: its type as the event name, the rest as data (or null). */
function rowOf(event: { type: string } & Record<string, unknown>): Pick<EventRow, 'event' | 'data'> {
  const { type, ...data } = event;
  return { event: type, data: Object.keys(data).length > 0 ? data : null };
}

describe('parseRecordedEvent: what the log hands back is what the machine took', () => {
  it.each(actorKinds)(
    '%s: every input and event a machine takes comes back from its row as it was',
    (kind) => {
      const machine = machines[kind].machine;
      for (const walk of walks[kind]) {
        expect(parseRecordedEvent(kind, { event: initEvent, data: walk.input })).toEqual({
          ok: true,
          event: { type: initEvent, input: walk.input },
        });
        const events = [...walk.events, ...delayedEvents(machine)] as Array<{ type: string }>;
        for (const event of events) {
          expect(parseRecordedEvent(kind, rowOf(event)), event.type).toEqual({ ok: true, event });
        }
      }
    },
  );

  it('an input the machine does not take names the field', () => {
    const parsed = parseRecordedEvent('turn', {
      event: initEvent,
      data: { turnId: 't', askMsgId: 'm', traceId: 'x', asker: 'a', recipient: 'r', startedAt: 1 },
    });
    expect(parsed).toMatchObject({ ok: false, unknownType: false });
    expect(parsed.ok || parsed.problem).toMatch(/^has an input the turn machine does not take \(deadline: /);
  });

  it('an event of the machine with a payload it does not take names the field', () => {
    const parsed = parseRecordedEvent('delivery', {
      event: 'delivery.deadLettered',
      data: { reason: 'bored' },
    });
    expect(parsed).toMatchObject({ ok: false, unknownType: false });
    expect(parsed.ok || parsed.problem).toMatch(/^does not fit the delivery machine \(reason: /);
  });

  it('an event the machine has no name for is told apart (the machine would take no transition)', () => {
    expect(parseRecordedEvent('send', { event: 'send.teleported', data: null })).toEqual({
      ok: false,
      unknownType: true,
      problem: 'is no event of the send machine',
    });
    // Another machine's event is no event of this one.
    expect(parseRecordedEvent('entity', { event: 'delivery.inject', data: null })).toMatchObject({
      ok: false,
      unknownType: true,
    });
  });

  it('a delayed event carries no data', () => {
    const type = 'xstate.after.untilDeadline.delivery.pending';
    expect(parseRecordedEvent('delivery', { event: type, data: null })).toEqual({
      ok: true,
      event: { type },
    });
    expect(parseRecordedEvent('delivery', { event: type, data: { x: 1 } })).toMatchObject({ ok: false });
  });

  it('what a schema does not name is not handed on', () => {
    expect(
      parseRecordedEvent('delivery', { event: 'delivery.acked', data: { via: 'pane', extra: 1 } }),
    ).toEqual({
      ok: true,
      event: { type: 'delivery.acked', via: 'pane' },
    });
  });

  it('the upcast table names only registered machines', () => {
    for (const kind of Object.keys(upcasts)) expect(actorKinds).toContain(kind);
  });
});

describe('parseRecordedEvent: an older shape is upcast before it is parsed', () => {
  // A delivery as gateways recorded it before verified submission (git: 7cbb3d8's delivery
  // machine): typed with Enter in one step, `delivery.injected {recovered}`, into a state
  // named `injected`; its input has none of the fields added since (kind, turnId, recheckMs).
  const fixture = join(
    import.meta.dirname,
    '..',
    'fixtures',
    'upcast',
    'delivery-before-verified-submission.ndjson',
  );
  const rows = readFileSync(fixture, 'utf8')
    .trimEnd()
    .split('\n')
    .map((line) => JSON.parse(line) as EventRow);
  // What an upcaster for it reads it as today: the agent took it.
  const table: Upcasts = {
    delivery: { 'delivery.injected': () => ({ event: 'delivery.submitted', data: null }) },
  };

  function fold(by: Upcasts): string[] {
    let snapshot: AnyMachineSnapshot | undefined;
    const states: string[] = [];
    for (const row of rows) {
      const parsed = parseRecordedEvent('delivery', row, by);
      if (!parsed.ok) throw new Error(parsed.problem);
      const { event } = parsed;
      [snapshot] =
        event.type === initEvent
          ? pureInitialTransition(machines.delivery.machine, event.input)
          : pureTransition(machines.delivery.machine, snapshot as AnyMachineSnapshot, event);
      states.push(stateName(snapshot.value));
    }
    return states;
  }

  it('the upcaster turns the older event into the current one; without it the row is read as recorded', () => {
    const older = rows[2] as EventRow;
    expect(parseRecordedEvent('delivery', older, table)).toEqual({
      ok: true,
      event: { type: 'delivery.submitted' },
    });
    expect(parseRecordedEvent('delivery', older, {})).toEqual({
      ok: true,
      event: { type: 'delivery.injected', recovered: true },
    });
  });

  it('the upcast log folds to the outcome the machine gives the older event itself', () => {
    expect(fold(table)).toEqual(['pending', 'injecting', 'submitted', 'acked']);
    expect(fold(table)).toEqual(fold({}));
  });
});
