import { performance } from 'node:perf_hooks';
import type { WriteOp, Writer } from './writers.js';

/** One committed batch, for the store's metrics. */
export interface CommitStats {
  /** Statements in the transaction (the rows it wrote or deleted). */
  ops: number;
  /** From the batch's first write until it was durable: the longest any of its writes waited. */
  waitedMs: number;
  /** The commit itself, on the writer: the transaction and its fsync. */
  commitMs: number;
}

/**
 * Collects the writes made while the previous batch commits and commits them as the next one,
 * in one transaction: a burst of events costs one fsync (group commit), and one commit is in
 * flight at a time, so batches land in order. Callers that guard an effect (an ack, a typed
 * message) wait for it with `flush()` or register the effect with `afterCommit()`.
 */
export class WriteBatch {
  private ops: WriteOp[] = [];
  /** The pending writes that a later one with the same key replaces (see `write`). */
  private keyed = new Map<string, WriteOp>();
  private committed: Array<() => void> = [];
  private waiters: Array<{ resolve: () => void; reject: (err: unknown) => void }> = [];
  private scheduled = false;
  private inFlight = false;
  private failure: unknown;
  /** When the first write of the next batch came (performance.now()). */
  private firstWriteAt = 0;

  constructor(
    private readonly writer: Writer,
    private readonly onFailure: (err: unknown) => void,
    private readonly onCommitted: (stats: CommitStats) => void = () => {},
  ) {}

  /**
   * Adds a write to the next transaction. A write with a `key` stands in for the pending one
   * with the same key, in its place, rather than being added: for a row whose last value is all
   * that needs to be durable (an actor's head, upserted at each transition), or a row that a
   * later write of the batch undoes (a body put and purged: the purge takes the put's place, so
   * the body never reaches the disk). With `merge`, the pending write is handed to `merge`
   * instead, which folds this one into it (an actor's events of one batch, one row) and says
   * so, or says it cannot: then this one is added after it, and is the pending one from then on.
   */
  write(sql: string, params: unknown[], key?: string, merge?: (pending: WriteOp) => boolean): void {
    if (key !== undefined) {
      const pending = this.keyed.get(key);
      if (pending && merge === undefined) {
        pending.sql = sql;
        pending.params = params;
        return;
      }
      if (pending && merge?.(pending)) return;
    }
    if (this.ops.length === 0) this.firstWriteAt = performance.now();
    const op = { sql, params };
    this.ops.push(op);
    if (key !== undefined) this.keyed.set(key, op);
    this.schedule();
  }

  /** Runs `effect` once everything written so far is durable. */
  afterCommit(effect: () => void): void {
    this.committed.push(effect);
    this.schedule();
  }

  /** Resolves once everything written so far is durable. */
  flush(): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.ops.length === 0 && this.committed.length === 0 && !this.scheduled && !this.inFlight) {
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight || this.failure !== undefined) return;
    this.scheduled = true;
    setImmediate(() => void this.commit());
  }

  private async commit(): Promise<void> {
    this.scheduled = false;
    const ops = this.ops;
    const committed = this.committed;
    const waiters = this.waiters;
    const firstWriteAt = this.firstWriteAt;
    this.ops = [];
    this.keyed = new Map();
    this.committed = [];
    this.waiters = [];
    this.inFlight = true;
    let stats: CommitStats | undefined;
    try {
      if (ops.length > 0) {
        const started = performance.now();
        await this.writer.commit(ops);
        const done = performance.now();
        stats = { ops: ops.length, waitedMs: done - firstWriteAt, commitMs: done - started };
      }
    } catch (err) {
      // Memory and log now disagree; nothing after this may act as if the batch were durable.
      this.failure = err;
      this.inFlight = false;
      for (const waiter of [...waiters, ...this.waiters]) waiter.reject(err);
      this.onFailure(err);
      return;
    }
    this.inFlight = false;
    if (stats) this.onCommitted(stats);
    for (const waiter of waiters) waiter.resolve();
    for (const effect of committed) effect();
    if (this.ops.length > 0 || this.committed.length > 0 || this.waiters.length > 0) this.schedule();
  }
}
