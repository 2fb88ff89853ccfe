import type { Config } from '../config/schema.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import type { ParkedCalls } from '../kernel/ParkedCalls.js';
import type { EntityActor } from './EntityActor.js';
import type { Handover } from './handover.js';

export interface DrainsDeps {
  config: Pick<Config, 'limits'>;
  lifecycle: Lifecycle;
  /** Where a drain that waits parks (R-H8). */
  parked: ParkedCalls;
}

/** The drain tool's call (U1): an entity takes its held messages, within the gateway's limits. */
export class Drains {
  constructor(private readonly deps: DrainsDeps) {}

  /**
   * Hands over held messages (at most `max`, capped by limits.maxDrain); the caller confirms (or
   * gives back) the returned handover. With `waitMs` (at most limits.maxWaitMs) and nothing
   * held, it is a long poll: it returns as soon as a message is held, or empty once the wait is
   * over or `signal` aborts.
   */
  async drain(entity: EntityActor, max?: number, waitMs?: number, signal?: AbortSignal): Promise<Handover> {
    const { config, lifecycle, parked } = this.deps;
    lifecycle.assertRunning();
    const { maxDrain, maxWaitMs } = config.limits;
    const ms = Math.min(waitMs ?? 0, maxWaitMs);
    const most = Math.min(max ?? maxDrain, maxDrain);
    if (ms <= 0) return entity.drain(most);
    return parked.park(entity.gid, entity.record.name, () => entity.drain(most, { ms, signal }));
  }
}
