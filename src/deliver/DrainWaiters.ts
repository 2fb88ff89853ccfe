import type { Clock } from '../kernel/clock.js';

/** What a long-poll drain waits with: how long at most, and a signal that ends the wait early. */
export interface DrainWait {
  ms: number;
  signal?: AbortSignal | undefined;
}

/**
 * The drains of one entity parked until a message is held for it (a long poll): woken all at
 * once, each then takes what it can, and one that finds nothing parks again for the rest of its
 * wait. A wait also ends when its time is up or its signal aborts (the caller hung up).
 */
export class DrainWaiters {
  private readonly parked = new Set<() => void>();

  constructor(private readonly clock: Clock) {}

  /** Resolves on the next `wakeAll`, after `ms`, or when `signal` aborts, whichever comes first. */
  wait(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        if (!this.parked.delete(done)) return;
        this.clock.clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      this.parked.add(done);
      const timer = this.clock.setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  wakeAll(): void {
    for (const done of [...this.parked]) done();
  }
}
