import { describe, expect, it } from 'vitest';
import { type CommitStats, WriteBatch } from '../../src/store/WriteBatch.js';
import { createBatchEncoder, type WriteOp, type Writer } from '../../src/store/writers.js';

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

  it('a keyed write of another statement takes the pending one’s place (a purge of a body put in the same batch)', async () => {
    const writer = recordingWriter();
    const batch = new WriteBatch(writer, () => {});
    batch.write('put', ['m1', 'body'], 'body m1');
    batch.write('event', [1]);
    batch.write('purge', ['m1'], 'body m1');
    await batch.flush();
    expect(writer.batches).toEqual([
      [
        { sql: 'purge', params: ['m1'] },
        { sql: 'event', params: [1] },
      ],
    ]);
  });

  it('with merge, a keyed write folds into the pending one’s parameters (an actor’s events of one batch)', async () => {
    const writer = recordingWriter();
    const batch = new WriteBatch(writer, () => {});
    const append = (actor: string, event: string) =>
      batch.write('event', [actor, event, []], `event ${actor}`, ({ params }) => {
        (params[2] as string[]).push(event);
        return true;
      });
    append('a', 'init');
    append('b', 'init');
    append('a', 'hold');
    append('a', 'inject');
    await batch.flush();
    append('a', 'typed');
    await batch.flush();
    expect(writer.batches).toEqual([
      [
        { sql: 'event', params: ['a', 'init', ['hold', 'inject']] },
        { sql: 'event', params: ['b', 'init', []] },
      ],
      [{ sql: 'event', params: ['a', 'typed', []] }],
    ]);
  });
  it('a merge that cannot fold the write adds it after the pending one, which it then stands for', async () => {
    const writer = recordingWriter();
    const batch = new WriteBatch(writer, () => {});
    // Folds into a pending write of a lower number only.
    const put = (n: number) =>
      batch.write('put', [n], 'k', (pending) => {
        if ((pending.params[0] as number) >= n) return false;
        pending.params = [n];
        return true;
      });
    put(2);
    put(3);
    put(1);
    put(4);
    await batch.flush();
    expect(writer.batches).toEqual([
      [
        { sql: 'put', params: [3] },
        { sql: 'put', params: [4] },
      ],
    ]);
  });
});

describe('createBatchEncoder', () => {
  it('names each statement by an id, its text sent in the first batch that uses it; parameters flat, in order', () => {
    const encode = createBatchEncoder();
    const first = encode([
      { sql: 'INSERT a', params: [1, 'x'] },
      { sql: 'INSERT b', params: [] },
      { sql: 'INSERT a', params: [2, null] },
    ]);
    expect(first.defined).toEqual([
      [0, 'INSERT a'],
      [1, 'INSERT b'],
    ]);
    expect([...first.shape]).toEqual([0, 2, 1, 0, 0, 2]);
    expect(first.params).toEqual([1, 'x', 2, null]);
    const second = encode([
      { sql: 'INSERT b', params: ['y'] },
      { sql: 'INSERT c', params: [3] },
    ]);
    expect(second.defined).toEqual([[2, 'INSERT c']]);
    expect([...second.shape]).toEqual([1, 1, 2, 1]);
    expect(second.params).toEqual(['y', 3]);
  });
});
