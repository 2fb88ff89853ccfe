import { describe, expect, it } from 'vitest';
import { type CommitStats, WriteBatch } from '../../src/store/WriteBatch.js';
import type { WriteOp, Writer } from '../../src/store/writers.js';

/** A writer that records each transaction it is given. */
function recordingWriter(): Writer & { batches: WriteOp[][] } {
  const batches: WriteOp[][] = [];
  return {
    batches,
    commit: async (ops) => {
      batches.push(ops.map((op) => ({ sql: op.sql, params: [...op.params] })));
    },
    close: async () => {},
  };
}

describe('WriteBatch', () => {
  it('a keyed write replaces the pending one with its key, in its place; unkeyed writes all stay, in order', async () => {
    const writer = recordingWriter();
    const stats: CommitStats[] = [];
    const batch = new WriteBatch(
      writer,
      () => {},
      (s) => stats.push(s),
    );
    batch.write('event', [1]);
    batch.write('head', ['a', 'pending'], 'head a');
    batch.write('event', [2]);
    batch.write('head', ['b', 'pending'], 'head b');
    batch.write('head', ['a', 'held'], 'head a');
    batch.write('event', [3]);
    batch.write('head', ['a', 'done'], 'head a');
    await batch.flush();
    expect(writer.batches).toEqual([
      [
        { sql: 'event', params: [1] },
        { sql: 'head', params: ['a', 'done'] },
        { sql: 'event', params: [2] },
        { sql: 'head', params: ['b', 'pending'] },
        { sql: 'event', params: [3] },
      ],
    ]);
    expect(stats.map((s) => s.ops)).toEqual([5]);
    expect(stats[0]!.waitedMs).toBeGreaterThanOrEqual(stats[0]!.commitMs);
  });

  it('a key replaces only within one batch: the next batch writes it again', async () => {
    const writer = recordingWriter();
    const batch = new WriteBatch(writer, () => {});
    batch.write('head', ['a', 'pending'], 'head a');
    await batch.flush();
    batch.write('head', ['a', 'held'], 'head a');
    batch.write('head', ['a', 'done'], 'head a');
    await batch.flush();
    expect(writer.batches).toEqual([
      [{ sql: 'head', params: ['a', 'pending'] }],
      [{ sql: 'head', params: ['a', 'done'] }],
    ]);
  });

  it('writes made while a commit is in flight go into the next transaction, with their own keys', async () => {
    let release!: () => void;
    const batches: WriteOp[][] = [];
    const writer: Writer = {
      commit: (ops) => {
        batches.push(ops.map((op) => ({ sql: op.sql, params: [...op.params] })));
        return batches.length === 1 ? new Promise<void>((r) => (release = r)) : Promise.resolve();
      },
      close: async () => {},
    };
    const batch = new WriteBatch(writer, () => {});
    batch.write('head', ['a', 'pending'], 'head a');
    const first = batch.flush();
    await new Promise((r) => setImmediate(r));
    // In flight now: these must not touch the batch being committed.
    batch.write('head', ['a', 'held'], 'head a');
    batch.write('head', ['a', 'done'], 'head a');
    release();
    await first;
    await batch.flush();
    expect(batches).toEqual([
      [{ sql: 'head', params: ['a', 'pending'] }],
      [{ sql: 'head', params: ['a', 'done'] }],
    ]);
  });
});
