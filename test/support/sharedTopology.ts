import { setupSharedTopology } from '../../src/federation/sharedTopology.js';
import { brokerUri, removeDeadLetters } from './federation.js';

/**
 * A test gateway's host id: `<prefix>-<pid>-<8 hex>` (support/broker uniqueHostId), or a prefix
 * and 5 or 6 random base-36 characters (GatewayProcess's default, the outage and partition
 * tests' `alpha-…`). The test broker is this project's own; a gateway of a deployment sharing it
 * that is named this way and whose letters are 15 minutes old would lose them to the sweep.
 */
const testHost = /-(?:\d+-[0-9a-f]{8}|[0-9a-z]{5,6})$/;
/** Letters younger than this may belong to a run still going beside this one. */
const staleMs = 15 * 60_000;

/**
 * Vitest global setup of the projects that use the shared broker: what an operator does once
 * per broker (`agentbridge broker setup`), done here with the test broker's guest login, so
 * gateways (which only check the shared topology) find it. Idempotent, so concurrent runs of
 * other worktrees do not mind. Then it clears `bridge.dlq` of what earlier test runs left there
 * (see sweepStaleTestLetters).
 */
export default async function setup(): Promise<void> {
  try {
    await setupSharedTopology({ uri: brokerUri });
    const swept = await sweepStaleTestLetters();
    if (swept > 0) process.stderr.write(`bridge.dlq: removed ${swept} letters earlier test runs left\n`);
  } catch (err) {
    // A broker that is down now is every federated test's own failure to report, with its
    // own message; the setup is not what they test.
    process.stderr.write(`shared broker topology not set up (${(err as Error).message})\n`);
  }
}

/**
 * Removes from the shared `bridge.dlq` the letters of test gateways (by their host id's form)
 * older than `staleMs`: letters of tests that were killed, or that leave theirs. Left to grow,
 * the queue passes what a reader looks at (the console reads the first 2,000), and a test's new
 * letter at its tail is never seen. Everything else goes back untouched.
 */
function sweepStaleTestLetters(): Promise<number> {
  const now = Date.now();
  return removeDeadLetters((headers) => {
    const host = headers['x-bridge-host'];
    if (typeof host !== 'string' || !testHost.test(host)) return false;
    const diedAt = deadAt(headers);
    return diedAt === undefined || now - diedAt > staleMs;
  });
}

/** When a letter died: the gateway's `x-bridge-at`, else the broker's first `x-death` time (s). */
function deadAt(headers: Record<string, unknown>): number | undefined {
  if (typeof headers['x-bridge-at'] === 'string') {
    const at = Date.parse(headers['x-bridge-at']);
    return Number.isNaN(at) ? undefined : at;
  }
  const time = (headers['x-death'] as Array<{ time?: { value?: number } | number }> | undefined)?.[0]?.time;
  const seconds = typeof time === 'number' ? time : time?.value;
  return seconds === undefined ? undefined : seconds * 1000;
}
