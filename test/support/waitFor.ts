import { setTimeout as sleep } from 'node:timers/promises';

/** The pause between two probes, at the least. */
const minPauseMs = 50;

/**
 * Polls `probe` until it returns something other than undefined, or fails naming `what`. A probe
 * that takes time (a CLI process, a broker query) is followed by a pause as long as it took, so
 * that a poll loop never keeps a core busy starting processes while other tests run beside it.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  ms = 15_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const started = Date.now();
    const value = await probe();
    if (value !== undefined) return value;
    await sleep(Math.max(minPauseMs, Date.now() - started));
  }
  throw new Error(`timed out waiting for ${what}`);
}
