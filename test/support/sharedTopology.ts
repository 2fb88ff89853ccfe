import { setupSharedTopology } from '../../src/broker/sharedTopology.js';
import { brokerUri } from './federation.js';

/**
 * Vitest global setup of the projects that use the shared broker: what an operator does once
 * per broker (`bridge broker setup`), done here with the test broker's guest login, so
 * gateways (which only check the shared topology) find it. Idempotent, so concurrent runs of
 * other worktrees do not mind.
 */
export default async function setup(): Promise<void> {
  try {
    await setupSharedTopology({ uri: brokerUri });
  } catch (err) {
    // A broker that is down now is every federated test's own failure to report, with its
    // own message; the setup is not what they test.
    process.stderr.write(`shared broker topology not set up (${(err as Error).message})\n`);
  }
}
