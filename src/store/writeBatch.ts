import type { Database } from 'better-sqlite3';

/**
 * Collects writes made during one tick and commits them in a single transaction, so that a
 * burst of events costs one fsync. Callers that guard an effect (an ack, a typed message) wait
 * for the commit with `flush()` or register the effect with `afterCommit()`.
 */
export class WriteBatch {
  private ops: Array<() => void> = [];
  private committed: Array<() => void> = [];
  private waiters: Array<{ resolve: () => void; reject: (err: unknown) => void }> = [];
  private scheduled = false;
  private failure: unknown;

  constructor(
    private readonly db: Database,
    private readonly onFailure: (err: unknown) => void,
  ) {}

  /** Adds a write to the current transaction. */
  write(op: () => void): void {
    this.ops.push(op);
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
    if (this.ops.length === 0 && this.committed.length === 0 && !this.scheduled) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      this.schedule();
    });
  }

  /** Commits now, synchronously (used at shutdown). */
  commitNow(): void {
    this.commit();
  }

  private schedule(): void {
    if (this.scheduled || this.failure !== undefined) return;
    this.scheduled = true;
    setImmediate(() => this.commit());
  }

  private commit(): void {
    this.scheduled = false;
    const ops = this.ops;
    const committed = this.committed;
    const waiters = this.waiters;
    this.ops = [];
    this.committed = [];
    this.waiters = [];
    if (ops.length > 0) {
      try {
        this.db.transaction(() => {
          for (const op of ops) op();
        })();
      } catch (err) {
        // Memory and log now disagree; nothing after this may act as if the batch were durable.
        this.failure = err;
        for (const waiter of waiters) waiter.reject(err);
        this.onFailure(err);
        return;
      }
    }
    for (const waiter of waiters) waiter.resolve();
    for (const effect of committed) effect();
  }
}
