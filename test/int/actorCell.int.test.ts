import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimulatedClock } from 'xstate';
import { ActorCell, type ActorIdentity, type RuntimeDeps } from '../../src/kernel/ActorCell.js';
import { silentLogger } from '../../src/log/logger.js';
import {
  type DeliveryContext,
  type DeliveryInput,
  deliveryMachine,
} from '../../src/machines/deliveryMachine.js';
import { readActorHead } from '../../src/store/actorHeads.js';
import { deliveryActorId } from '../../src/store/actorIds.js';
import { openStore, type Store } from '../../src/store/openStore.js';
import { readActorEvents, readLastHlc } from '../../src/store/readEvents.js';
import { WriteBatch } from '../../src/store/WriteBatch.js';
import type { WriteOp, Writer } from '../../src/store/writers.js';
import { createHlc, isHlc } from '../../src/wire/hlc.js';

type DeliveryCell = ActorCell<typeof deliveryMachine>;

const host = 'host-a';
const recipient = 'worker-gid';
const pendingTimer = 'xstate.after.untilDeadline.delivery.pending';

let dir: string;
let file: string;
/** Everything opened by a test, closed after it (a store may already be closed by the test). */
let toClose: Array<() => unknown>;
let writeFailures: unknown[];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'bridge-actorcell-int-'));
  file = join(dir, 'events.db');
  toClose = [];
  writeFailures = [];
});

afterEach(async () => {
  for (const close of toClose.reverse()) {
    try {
      await close();
    } catch {
      // already closed by the test
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

function open(): Store {
  const store = openStore({ file, onWriteFailure: (err) => writeFailures.push(err) });
  toClose.push(() => store.close());
  return store;
}

/** A second, read-only connection: it sees only what is committed to the file. */
function reader(): Database {
  const db = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
  toClose.push(() => db.close());
  return db;
}

function committedStates(db: Database, actorId: string): string[] {
  return db
    .prepare<[string], { to_state: string }>('SELECT to_state FROM event_log WHERE actor_id = ? ORDER BY hlc')
    .all(actorId)
    .map((row) => row.to_state);
}

interface Process {
  store: Store;
  clock: SimulatedClock;
  deps: RuntimeDeps;
  /** The effects that ran, each with the last state committed to the file when it ran. */
  effects: Array<{ effect: string; committed: string | undefined }>;
  machine: typeof deliveryMachine;
}

/**
 * One gateway process: a store on the shared file, its own simulated clock starting at `now`,
 * and the delivery machine with recording effects and the wall-clock deadline delay the
 * runtime supplies (as EntityActor does).
 */
function startProcess(now: number): Process {
  const store = open();
  const clock = new SimulatedClock();
  clock.set(now);
  const deps: RuntimeDeps = {
    store,
    clock,
    hlc: createHlc(() => clock.now(), readLastHlc(store)),
    host,
    logger: silentLogger(),
  };
  const db = reader();
  const effects: Process['effects'] = [];
  const record =
    (effect: string) =>
    ({ context }: { context: DeliveryContext }): void => {
      const states = committedStates(db, actorId(context.msgId));
      effects.push({ effect, committed: states[states.length - 1] });
    };
  const machine = deliveryMachine.provide({
    actions: {
      typeIntoPane: record('typeIntoPane'),
      verifyInjection: record('verifyInjection'),
      deadLetter: record('deadLetter'),
    },
    delays: {
      untilDeadline: ({ context }) => Math.max(0, context.deadline - clock.now()),
    },
  });
  return { store, clock, deps, effects, machine };
}

function actorId(msgId: string): string {
  return deliveryActorId(msgId, recipient);
}

function inputFor(msgId: string, acceptedAt: number, overrides: Partial<DeliveryInput> = {}): DeliveryInput {
  return {
    msgId,
    traceId: `trace-of-${msgId}`,
    recipient,
    sender: 'main-gid',
    mode: 'inject',
    acceptedAt,
    deadline: acceptedAt + 60_000,
    maxAttempts: 3,
    retryBaseMs: 100,
    digest: 'sha256:0123',
    size: 5,
    ...overrides,
  };
}

function identityFor(input: DeliveryInput): ActorIdentity {
  return {
    kind: 'delivery',
    id: actorId(input.msgId),
    traceId: input.traceId,
    msgId: input.msgId,
    owner: input.recipient,
  };
}

function createDelivery(proc: Process, input: DeliveryInput): DeliveryCell {
  return ActorCell.create(proc.machine, input, identityFor(input), proc.deps);
}

function rehydrateDelivery(proc: Process, input: DeliveryInput): DeliveryCell {
  const rows = readActorEvents(proc.store, 'delivery', actorId(input.msgId));
  return ActorCell.rehydrate(proc.machine, rows, identityFor(input), proc.deps);
}

describe('ActorCell: the event log', () => {
  it('appends every transition with from/to states, hlc, traceId and msgId', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-log', 1_000);
    const id = actorId(input.msgId);
    const cell = createDelivery(proc, input);
    cell.send({ type: 'delivery.inject' });
    cell.send({ type: 'delivery.injectFailed', error: 'pane busy' });
    await proc.store.batch.flush();

    const rows = readActorEvents(proc.store, 'delivery', id);
    expect(rows.map((r) => [r.event, r.fromState, r.toState, r.data])).toEqual([
      ['xstate.init', null, 'pending', input],
      ['delivery.inject', 'pending', 'injecting', null],
      ['delivery.injectFailed', 'injecting', 'backoff', { error: 'pane busy' }],
    ]);
    for (const row of rows) {
      expect(row).toMatchObject({
        host,
        actorKind: 'delivery',
        actorId: id,
        traceId: input.traceId,
        msgId: input.msgId,
      });
      expect(isHlc(row.hlc)).toBe(true);
    }
    const hlcs = rows.map((r) => r.hlc);
    expect([...hlcs].sort()).toEqual(hlcs);
    expect(new Set(hlcs).size).toBe(hlcs.length);
    expect(rows.map((r) => r.seq)).toEqual([...rows.map((r) => r.seq)].sort((a = 0, b = 0) => a - b));
  });

  it('an event the state does not take is neither applied nor logged', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-ignored', 1_000);
    const cell = createDelivery(proc, input);
    const transitions: string[] = [];
    cell.onTransition = (t) => transitions.push(`${t.from}->${t.to}`);
    expect(cell.can({ type: 'delivery.found' })).toBe(false);
    cell.send({ type: 'delivery.found' });
    cell.send({ type: 'delivery.acked', via: 'pane' });
    await proc.store.batch.flush();
    expect(cell.state).toBe('pending');
    expect(transitions).toEqual([]);
    expect(readActorEvents(proc.store, 'delivery', actorId(input.msgId)).map((r) => r.event)).toEqual([
      'xstate.init',
    ]);
  });

  it('the actors head row tracks the state, the owner and done', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-head', 1_000);
    const id = actorId(input.msgId);
    const cell = createDelivery(proc, input);
    await proc.store.batch.flush();
    expect(readActorHead(proc.store, 'delivery', id)).toEqual({
      actorKind: 'delivery',
      actorId: id,
      owner: recipient,
      traceId: input.traceId,
      state: 'pending',
      done: false,
    });
    cell.send({ type: 'delivery.inject' });
    await proc.store.batch.flush();
    expect(readActorHead(proc.store, 'delivery', id)).toMatchObject({ state: 'injecting', done: false });
    cell.send({ type: 'delivery.submitted' });
    cell.send({ type: 'delivery.acked', via: 'pane' });
    await proc.store.batch.flush();
    expect(cell.done).toBe(true);
    expect(readActorHead(proc.store, 'delivery', id)).toMatchObject({ state: 'acked', done: true });
  });

  it('a finished actor ignores further events: no row, no effect, no state change', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-done', 1_000);
    const cell = createDelivery(proc, input);
    cell.send({ type: 'delivery.inject' });
    cell.send({ type: 'delivery.submitted' });
    cell.send({ type: 'delivery.acked', via: 'pane' });
    await proc.store.batch.flush();
    const before = readActorEvents(proc.store, 'delivery', actorId(input.msgId)).length;
    cell.send({ type: 'delivery.deadLettered', reason: 'rejected' });
    await proc.store.batch.flush();
    expect(cell.state).toBe('acked');
    expect(cell.context.reason).toBeNull();
    expect(readActorEvents(proc.store, 'delivery', actorId(input.msgId))).toHaveLength(before);
    expect(proc.effects.map((e) => e.effect)).toEqual(['typeIntoPane']);
  });
});

describe('ActorCell: effects run only after the batch commits', () => {
  it('nothing is on disk and no effect has run until the commit; then the effect sees its transition', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-effects', 1_000);
    const db = reader();
    const cell = createDelivery(proc, input);
    cell.send({ type: 'delivery.inject' });
    // Memory has moved on at once...
    expect(cell.state).toBe('injecting');
    // ...but the log and the effects wait for the batch.
    expect(committedStates(db, actorId(input.msgId))).toEqual([]);
    expect(proc.effects).toEqual([]);
    await proc.store.batch.flush();
    expect(committedStates(db, actorId(input.msgId))).toEqual(['pending', 'injecting']);
    expect(proc.effects).toEqual([{ effect: 'typeIntoPane', committed: 'injecting' }]);
  });

  it('timers are armed only after the commit too', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-timer-commit', 1_000);
    const cell = createDelivery(proc, input);
    // Past the deadline before the batch committed: no timer exists yet, nothing fires.
    proc.clock.increment(120_000);
    expect(cell.state).toBe('pending');
    await proc.store.batch.flush();
    // The delay was computed at the transition (60 s) and starts counting at the commit.
    proc.clock.increment(59_999);
    expect(cell.state).toBe('pending');
    proc.clock.increment(1);
    expect(cell.state).toBe('dead-lettered');
  });

  it('a live deadline timer fires at the deadline, not before, and runs deadLetter after its commit', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-expire', 1_000);
    const cell = createDelivery(proc, input);
    await proc.store.batch.flush();
    proc.clock.increment(59_999);
    expect(cell.state).toBe('pending');
    proc.clock.increment(1);
    expect(cell.state).toBe('dead-lettered');
    expect(proc.effects).toEqual([]);
    await proc.store.batch.flush();
    expect(cell.context.reason).toBe('expired');
    expect(proc.effects).toEqual([{ effect: 'deadLetter', committed: 'dead-lettered' }]);
  });

  it('leaving pending cancels its timer', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-cancel', 1_000);
    const cell = createDelivery(proc, input);
    await proc.store.batch.flush();
    cell.send({ type: 'delivery.inject' });
    cell.send({ type: 'delivery.submitted' });
    await proc.store.batch.flush();
    proc.clock.increment(120_000);
    await proc.store.batch.flush();
    expect(cell.state).toBe('submitted');
    expect(proc.effects.map((e) => e.effect)).toEqual(['typeIntoPane']);
  });

  it('the retry timer takes a failed injection back to pending after retryBaseMs', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-retry', 1_000);
    const cell = createDelivery(proc, input);
    cell.send({ type: 'delivery.inject' });
    cell.send({ type: 'delivery.injectFailed', error: 'pane busy' });
    await proc.store.batch.flush();
    proc.clock.increment(99);
    expect(cell.state).toBe('backoff');
    proc.clock.increment(1);
    expect(cell.state).toBe('pending');
    await proc.store.batch.flush();
    expect(readActorHead(proc.store, 'delivery', actorId(input.msgId))?.state).toBe('pending');
  });

  // Regression (was a bug in src/kernel/ActorCell.ts, `stop()`: `this.stopped = this.done || this.stopped`): stop()
  // on a live actor never sets `stopped`, so effects already queued for the commit (here the
  // deadline timer of its creation) re-arm timers after stop() has cleared them. The actor keeps
  // moving and logging after it was stopped; Gateway.stop() stops entities, then flushes, so a
  // timer is re-armed on the real clock just before the store is closed.
  it('stop() before the commit: no timer is armed afterwards and the log stays as it is', async () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-stop', 1_000);
    const cell = createDelivery(proc, input);
    cell.stop();
    await proc.store.batch.flush();
    const logged = readActorEvents(proc.store, 'delivery', actorId(input.msgId)).length;
    proc.clock.increment(120_000);
    await proc.store.batch.flush();
    expect(cell.state).toBe('pending');
    expect(readActorEvents(proc.store, 'delivery', actorId(input.msgId))).toHaveLength(logged);
    expect(proc.effects).toEqual([]);
  });
});

describe('ActorCell: rehydration', () => {
  it('a pending delivery with a deadline: re-armed after a restart, fires at the deadline as expired', async () => {
    // First life: accepted at t=1 s with a 60 s deadline, still pending when the process dies.
    const first = startProcess(1_000);
    const input = inputFor('m-rehydrate', 1_000);
    const id = actorId(input.msgId);
    createDelivery(first, input);
    await first.store.batch.flush();
    const lastHlcBefore = readLastHlc(first.store);
    await first.store.close();

    // Second life, 30 s later, with a fresh clock: 30 s remain before the deadline.
    const second = startProcess(31_000);
    const resumed = rehydrateDelivery(second, input);
    expect(resumed.state).toBe('pending');
    expect(resumed.context).toMatchObject({ msgId: input.msgId, deadline: 61_000, attempts: 0 });
    await second.store.batch.flush();
    // Rebuilding from the log runs nothing and logs nothing.
    expect(readActorEvents(second.store, 'delivery', id)).toHaveLength(1);
    expect(second.effects).toEqual([]);

    resumed.send({ type: 'actor.rehydrated' });
    await second.store.batch.flush();
    const afterRehydrate = readActorEvents(second.store, 'delivery', id);
    expect(afterRehydrate.map((r) => [r.event, r.fromState, r.toState])).toEqual([
      ['xstate.init', null, 'pending'],
      ['actor.rehydrated', 'pending', 'pending'],
    ]);
    // The restarted clock continues after the log's last time.
    expect((afterRehydrate[1]?.hlc ?? '') > (lastHlcBefore ?? '~')).toBe(true);

    second.clock.increment(29_999);
    expect(resumed.state).toBe('pending');
    await second.store.batch.flush();
    expect(second.effects).toEqual([]);

    second.clock.increment(1);
    expect(resumed.state).toBe('dead-lettered');
    await second.store.batch.flush();
    expect(resumed.context.reason).toBe('expired');
    expect(resumed.done).toBe(true);
    expect(second.effects).toEqual([{ effect: 'deadLetter', committed: 'dead-lettered' }]);
    expect(readActorHead(second.store, 'delivery', id)).toMatchObject({ state: 'dead-lettered', done: true });
    const last = readActorEvents(second.store, 'delivery', id).at(-1);
    expect(last).toMatchObject({ event: pendingTimer, fromState: 'pending', toState: 'dead-lettered' });

    // The log alone rebuilds the outcome.
    const replayed = rehydrateDelivery(second, input);
    expect(replayed.state).toBe('dead-lettered');
    expect(replayed.done).toBe(true);
    expect(replayed.context.reason).toBe('expired');
  });

  it('a held delivery past its deadline at restart expires on the first clock movement', async () => {
    const first = startProcess(1_000);
    const input = inputFor('m-held', 1_000, { mode: 'hold' });
    const cell = createDelivery(first, input);
    cell.send({ type: 'delivery.hold' });
    await first.store.batch.flush();
    await first.store.close();

    const second = startProcess(90_000);
    const resumed = rehydrateDelivery(second, input);
    expect(resumed.state).toBe('held');
    resumed.send({ type: 'actor.rehydrated' });
    await second.store.batch.flush();
    second.clock.increment(0);
    expect(resumed.state).toBe('dead-lettered');
    await second.store.batch.flush();
    expect(resumed.context.reason).toBe('expired');
    expect(second.effects.map((e) => e.effect)).toEqual(['deadLetter']);
  });

  it('a delivery caught in injecting is verified, not typed again (R-DL5)', async () => {
    const first = startProcess(1_000);
    const input = inputFor('m-injecting', 1_000);
    const id = actorId(input.msgId);
    const cell = createDelivery(first, input);
    cell.send({ type: 'delivery.inject' });
    await first.store.batch.flush();
    expect(first.effects.map((e) => e.effect)).toEqual(['typeIntoPane']);
    await first.store.close(); // died while typing: no typed/injectFailed recorded

    const second = startProcess(5_000);
    const resumed = rehydrateDelivery(second, input);
    expect(resumed.state).toBe('injecting');
    await second.store.batch.flush();
    expect(second.effects).toEqual([]);

    resumed.send({ type: 'actor.rehydrated' });
    expect(resumed.state).toBe('verifying');
    expect(second.effects).toEqual([]);
    await second.store.batch.flush();
    expect(second.effects).toEqual([{ effect: 'verifyInjection', committed: 'verifying' }]);
    expect(readActorEvents(second.store, 'delivery', id).at(-1)).toMatchObject({
      event: 'actor.rehydrated',
      fromState: 'injecting',
      toState: 'verifying',
    });

    resumed.send({ type: 'delivery.located', where: 'submitted' });
    await second.store.batch.flush();
    expect(resumed.state).toBe('submitted');
    expect(readActorHead(second.store, 'delivery', id)).toMatchObject({ state: 'submitted', done: false });
    expect(second.effects.map((e) => e.effect)).toEqual(['verifyInjection']);
  });

  it('rehydrate refuses a log that does not start with the creation event', () => {
    const proc = startProcess(1_000);
    const input = inputFor('m-empty', 1_000);
    expect(() => rehydrateDelivery(proc, input)).toThrow(/must start with xstate.init; found nothing/);
  });
});

describe('WriteBatch', () => {
  function insertKey(store: Store, key: string): void {
    store.batch.write('INSERT INTO idempotency (sender, key, msg_id) VALUES (?, ?, ?)', [
      's',
      key,
      `m-${key}`,
    ]);
  }

  function committedKeys(db: Database): string[] {
    return db
      .prepare<[], { key: string }>('SELECT key FROM idempotency ORDER BY key')
      .all()
      .map((r) => r.key);
  }

  /** A writer that records each batch it is given and commits when told to. */
  function recordingWriter() {
    const batches: WriteOp[][] = [];
    const gates: Array<() => void> = [];
    let holding = false;
    const writer: Writer = {
      commit: (ops) => {
        batches.push([...ops]);
        return holding ? new Promise<void>((resolve) => gates.push(resolve)) : Promise.resolve();
      },
      close: async () => {},
    };
    return {
      writer,
      batches,
      hold: () => {
        holding = true;
      },
      release: () => {
        holding = false;
        for (const gate of gates.splice(0)) gate();
      },
    };
  }

  it('many writes in one tick commit in one transaction', async () => {
    const recorder = recordingWriter();
    const batch = new WriteBatch(recorder.writer, () => {});
    for (let i = 0; i < 200; i++) batch.write('INSERT', [i]);
    await batch.flush();
    expect(recorder.batches.map((b) => b.length)).toEqual([200]);
  });

  it('writes in different ticks commit in different transactions', async () => {
    const recorder = recordingWriter();
    const batch = new WriteBatch(recorder.writer, () => {});
    batch.write('INSERT', ['a']);
    await batch.flush();
    batch.write('INSERT', ['b']);
    await batch.flush();
    expect(recorder.batches.map((b) => b.map((op) => op.params[0]))).toEqual([['a'], ['b']]);
  });

  it('writes made while a commit is in flight wait and go together into the next one (group commit)', async () => {
    const recorder = recordingWriter();
    const batch = new WriteBatch(recorder.writer, () => {});
    recorder.hold();
    batch.write('INSERT', ['first']);
    const first = batch.flush();
    await new Promise((r) => setImmediate(r));
    const order: string[] = [];
    batch.write('INSERT', ['x']);
    batch.write('INSERT', ['y']);
    batch.afterCommit(() => order.push('x,y durable'));
    void first.then(() => order.push('first durable'));
    await new Promise((r) => setImmediate(r));
    expect(recorder.batches).toHaveLength(1); // one commit in flight at a time
    recorder.release();
    await batch.flush();
    expect(recorder.batches.map((b) => b.map((op) => op.params[0]))).toEqual([['first'], ['x', 'y']]);
    expect(order).toEqual(['first durable', 'x,y durable']);
  });

  it('commits on the writer thread: the file has the writes once flush resolves', async () => {
    const store = open();
    const db = reader();
    const keys = Array.from({ length: 200 }, (_, i) => `k${String(i).padStart(3, '0')}`);
    for (const key of keys) insertKey(store, key);
    expect(committedKeys(db)).toEqual([]);
    await store.batch.flush();
    expect(committedKeys(db)).toEqual(keys);
  });

  it('afterCommit callbacks run after the commit, in registration order', async () => {
    const store = open();
    const db = reader();
    const seen: Array<[string, string[]]> = [];
    insertKey(store, 'a');
    store.batch.afterCommit(() => seen.push(['first', committedKeys(db)]));
    insertKey(store, 'b');
    store.batch.afterCommit(() => seen.push(['second', committedKeys(db)]));
    store.batch.afterCommit(() => seen.push(['third', committedKeys(db)]));
    expect(seen).toEqual([]);
    await store.batch.flush();
    expect(seen).toEqual([
      ['first', ['a', 'b']],
      ['second', ['a', 'b']],
      ['third', ['a', 'b']],
    ]);
  });

  it('a callback that writes waits for the next commit; flush covers it once awaited again', async () => {
    const store = open();
    const db = reader();
    const seen: string[] = [];
    insertKey(store, 'a');
    store.batch.afterCommit(() => {
      insertKey(store, 'b');
      store.batch.afterCommit(() => seen.push(`after b: ${committedKeys(db).join(',')}`));
    });
    await store.batch.flush();
    await store.batch.flush();
    expect(seen).toEqual(['after b: a,b']);
  });

  it('a failing write rejects flush(), calls onFailure, rolls the batch back and skips its effects', async () => {
    const store = open();
    const db = reader();
    insertKey(store, 'dup');
    await store.batch.flush();

    const effects: string[] = [];
    insertKey(store, 'fine');
    insertKey(store, 'dup'); // primary key violation
    store.batch.afterCommit(() => effects.push('ran'));
    const flushed = store.batch.flush();
    await expect(flushed).rejects.toThrow(/UNIQUE constraint failed: idempotency.sender, idempotency.key/);
    expect(writeFailures).toHaveLength(1);
    expect(String(writeFailures[0])).toMatch(/UNIQUE constraint failed/);
    expect(effects).toEqual([]);
    // All or nothing: the good write of the same batch is not on disk either.
    expect(committedKeys(db)).toEqual(['dup']);

    // The batch is poisoned: later writes are never committed and flush keeps rejecting.
    insertKey(store, 'later');
    await expect(store.batch.flush()).rejects.toThrow(/UNIQUE constraint failed/);
    expect(committedKeys(db)).toEqual(['dup']);
    expect(writeFailures).toHaveLength(1);
  });
});
