import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { ActorCell, type ActorIdentity, type RuntimeDeps } from '../../src/kernel/ActorCell.js';
import { resumeOrReport } from '../../src/kernel/resumeOrReport.js';
import { type DeliveryInput, deliveryMachine } from '../../src/machines/deliveryMachine.js';
import { appendEvent } from '../../src/store/appendEvent.js';
import type { EventRow } from '../../src/store/eventRow.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { readActorEvents, readLastHlc } from '../../src/store/readEvents.js';
import { createHlc } from '../../src/wire/hlc.js';
import { sampleDeliveryInput } from '../support/sampleInputs.js';

/**
 * What the log hands back goes through the machine's own schemas (parseRecordedEvent) before
 * the machine sees it: a stored row that does not fit is reported with the actor and the event,
 * and the actor is left in the store as it is, not rebuilt from something its machine never took.
 */

let dir: string;
let store: Store;
let deps: RuntimeDeps;
let lines: Array<Record<string, unknown>>;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'bridge-rehydrate-int-'));
  store = openStore({ file: join(dir, 'events.db'), onWriteFailure: (err) => lines.push({ err }) });
  const clock = new SimulatedClock();
  clock.set(1_000);
  lines = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  deps = { store, clock, hlc: createHlc(() => clock.now(), readLastHlc(store)), host: 'host-a', logger };
});

afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

// Its msgId is in the actor id the reports name.
const input: DeliveryInput = { ...sampleDeliveryInput, msgId: 'm-1' };
const identity: ActorIdentity = {
  kind: 'delivery',
  id: 'm-1/worker-gid',
  traceId: input.traceId,
  msgId: input.msgId,
  owner: input.recipient,
};

/** A delivery taken to `injecting`, then a row appended as a hand edit or another release would leave it. */
async function storedWith(event: string, data: EventRow['data']): Promise<readonly EventRow[]> {
  const cell = ActorCell.create(deliveryMachine, input, identity, deps);
  cell.send({ type: 'delivery.inject' });
  await store.batch.flush();
  const [first] = readActorEvents(store, 'delivery', identity.id);
  if (!first) throw new Error('the creation was not logged');
  const row = { ...first, event, fromState: 'injecting', toState: 'dead-lettered', data };
  appendEvent(store, row, { owner: input.recipient, done: true });
  await store.batch.flush();
  return readActorEvents(store, 'delivery', identity.id);
}

function resume(rows: readonly EventRow[]): {
  resumed: boolean;
  cell: ActorCell<typeof deliveryMachine> | undefined;
} {
  let cell: ActorCell<typeof deliveryMachine> | undefined;
  const resumed = resumeOrReport(deps.logger, { actor: identity.kind, id: identity.id }, () => {
    cell = ActorCell.rehydrate(deliveryMachine, rows, identity, deps);
  });
  return { resumed, cell };
}

/** The errors of the reports, as resumeOrReport logged them. */
function reportedErrors(): string[] {
  return reported().map((line) => (line.err as { message: string }).message);
}

function reported(): Array<Record<string, unknown>> {
  return lines.filter(
    (line) =>
      line.msg === 'a stored actor does not fold into its machine: left in the store as it is, not resumed',
  );
}

describe('rehydration parses each stored row with its machine’s schemas', () => {
  it('a row whose payload the schema refuses: reported naming the actor and the event, not rebuilt', async () => {
    const rows = await storedWith('delivery.deadLettered', { reason: 'bored', detail: 'hand-edited' });
    const { resumed, cell } = resume(rows);
    expect(resumed).toBe(false);
    expect(cell).toBeUndefined();
    expect(reported()).toEqual([expect.objectContaining({ actor: 'delivery', id: identity.id })]);
    expect(reportedErrors()[0]).toMatch(
      /^the delivery actor m-1\/worker-gid does not fold into its machine: its recorded event delivery\.deadLettered \(events row seq=2\) does not fit the delivery machine \(reason: /,
    );
    expect(readActorEvents(store, 'delivery', identity.id)).toHaveLength(3);
  });

  it('a row of an event the machine has no name for: reported too', async () => {
    const rows = await storedWith('delivery.teleported', null);
    expect(resume(rows).resumed).toBe(false);
    expect(reportedErrors()[0]).toMatch(
      /its recorded event delivery\.teleported \(events row seq=2\) is no event of the delivery machine$/,
    );
  });

  it('a creation whose input the schema refuses: reported', async () => {
    const rows = await storedWith('delivery.deadLettered', { reason: 'rejected' });
    const [first, ...rest] = rows as [EventRow, ...EventRow[]];
    const broken = [{ ...first, data: { ...input, maxAttempts: 'three' } }, ...rest];
    expect(resume(broken).resumed).toBe(false);
    expect(reportedErrors()[0]).toMatch(
      /its recorded event xstate\.init \(events row seq=1\) has an input the delivery machine does not take \(maxAttempts: /,
    );
  });

  it('rows that fit rebuild the actor as before', async () => {
    const rows = await storedWith('delivery.deadLettered', { reason: 'rejected', detail: 'refused' });
    const { resumed, cell } = resume(rows);
    expect(resumed).toBe(true);
    expect(cell?.state).toBe('dead-lettered');
    expect(cell?.context).toMatchObject({ reason: 'rejected', lastError: 'refused' });
    expect(reported()).toEqual([]);
  });
});

describe('ActorCell.send: an event the state does not take', () => {
  it('is logged at debug with the event and the state, and changes nothing', async () => {
    const cell = ActorCell.create(deliveryMachine, input, identity, deps);
    cell.send({ type: 'delivery.acked', via: 'pane' });
    await store.batch.flush();
    expect(cell.state).toBe('pending');
    expect(readActorEvents(store, 'delivery', identity.id).map((row) => row.event)).toEqual(['xstate.init']);
    expect(lines.filter((line) => line.msg === 'event not taken in this state: ignored')).toEqual([
      expect.objectContaining({
        level: 20,
        actor: 'delivery',
        id: identity.id,
        traceId: input.traceId,
        event: 'delivery.acked',
        state: 'pending',
      }),
    ]);
  });
});
