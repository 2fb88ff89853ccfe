import { setTimeout as delay } from 'node:timers/promises';

/**
 * Time as the gateway sees it. Same shape as XState's `Clock` plus `now()`, so tests can pass
 * XState's `SimulatedClock` and advance time by hand.
 */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Node fires any delay above 2^31-1 ms after 1 ms; longer ones are chained in steps. */
const maxTimerMs = 2 ** 31 - 1;

interface ChainedTimer {
  current: ReturnType<typeof setTimeout> | undefined;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => {
    const timer: ChainedTimer = { current: undefined };
    const arm = (remaining: number) => {
      const step = Math.min(Math.max(0, remaining), maxTimerMs);
      timer.current = setTimeout(() => (remaining > maxTimerMs ? arm(remaining - maxTimerMs) : fn()), step);
      timer.current.unref?.();
    };
    arm(ms);
    return timer;
  },
  clearTimeout: (handle) => clearTimeout((handle as ChainedTimer).current),
};

/**
 * Waits `ms` on `clock`: a step of an operation under way (a poll, a pause before Enter). On the
 * system clock the wait holds the process open, as the operation waiting on it should (the
 * clock's own timers do not).
 */
export function sleep(clock: Clock, ms: number): Promise<void> {
  if (clock === systemClock) return delay(ms);
  return new Promise((resolve) => clock.setTimeout(resolve, ms));
}
