import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';

/**
 * Reads `read` until it gives `want` or `ms` pass, and returns the last reading (for the
 * assertion to show). For a gateway's delivery states after a drain: the main can hold the
 * drain's answer before the gateway has recorded `acked` (that follows the response's
 * `finish`, then a commit), so a single read right after the drain may still see
 * `handed-over`.
 */
export async function readUntil<T>(read: () => T, want: T, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const reading = read();
    if (isDeepStrictEqual(reading, want) || Date.now() >= deadline) return reading;
    await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
  }
}
