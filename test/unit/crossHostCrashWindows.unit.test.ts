import { describe, expect, it } from 'vitest';
import { hasStalled } from '../support/hasStalled.js';
import { readUntil } from '../support/readUntil.js';

/**
 * The cross-host crash test's two judgements, whose defects showed as a "drained" stall on a
 * loaded CI machine: it stopped draining as the receiving gateway came back from its last
 * restart (the restarts alone had outlasted the stall window), and it read that gateway's
 * delivery states once, right after the drain that got the last batch, before the gateway had
 * recorded `acked` for it.
 */
describe('crossHostCrash: the stall window and the final delivery states', () => {
  const window = 10_000;
  const t0 = 1_000_000;

  it('an outage of the receiver longer than the stall window is no stall once it is back up', () => {
    // Last arrival at t0; B killed and restarted until t0 + 25 s (restarts of 7-9 s under load).
    const at = { now: t0 + 25_100, lastArrival: t0, lastUp: t0 + 25_000 };
    expect(hasStalled(at, window)).toBe(false);
  });

  it('nothing arriving for the window after the last restart is a stall', () => {
    expect(hasStalled({ now: t0 + 35_001, lastArrival: t0, lastUp: t0 + 25_000 }, window)).toBe(true);
    expect(hasStalled({ now: t0 + 10_001, lastArrival: t0, lastUp: t0 - 5_000 }, window)).toBe(true);
  });

  it('an arrival after the last restart opens the window again', () => {
    expect(hasStalled({ now: t0 + 12_000, lastArrival: t0 + 3_000, lastUp: t0 }, window)).toBe(false);
  });

  it('delivery states that reach acked a moment after the drain returned are waited for', async () => {
    // The confirm rides on the drain response's `finish`, then a commit: the main can hold the
    // answer while the gateway still records `handed-over`.
    const readings = [
      { 'handed-over': 140, acked: 860 },
      { 'handed-over': 140, acked: 860 },
    ];
    const read = () => readings.shift() ?? { acked: 1000 };
    expect(await readUntil(read, { acked: 1000 }, 2_000)).toEqual({ acked: 1000 });
  });

  it('delivery states that never settle are returned as last read, after the wait', async () => {
    const started = Date.now();
    const last = await readUntil<Record<string, number>>(
      () => ({ 'handed-over': 84, acked: 916 }),
      { acked: 1000 },
      300,
    );
    expect(last).toEqual({ 'handed-over': 84, acked: 916 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
  });
});
