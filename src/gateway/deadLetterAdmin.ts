import { BridgeError, ErrorCode } from '../errors.js';
import type { Federation } from '../federation/Federation.js';

/** The broker's dead-letter queue as the operator reaches it: read, and requeued. */
export type DeadLetterAdmin = Pick<
  Federation,
  'listDeadLetters' | 'latestDeadLetters' | 'requeueDeadLetters'
>;

/**
 * The federation's dead-letter queue; single-host, each call is refused with what to do (a
 * single-host gateway's dead letters stay in its event log with their reason).
 */
export function deadLetterAdmin(federation: Federation | undefined): DeadLetterAdmin {
  if (federation) return federation;
  const refuse = (what: string): never => {
    throw new BridgeError(
      ErrorCode.notAvailable,
      `${what} needs a broker: this gateway runs single-host (set broker.uri / BRIDGE_BROKER_URI); ` +
        'single-host dead letters stay in the event log with their reason',
    );
  };
  return {
    listDeadLetters: async () => refuse('agentbridge dlq'),
    latestDeadLetters: async () => refuse("the console's dead letters"),
    requeueDeadLetters: async () => refuse('agentbridge dlq requeue'),
  };
}
