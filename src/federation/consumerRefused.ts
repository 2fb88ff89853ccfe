import { BridgeError, ErrorCode } from '../errors.js';
import type { ConsumerSpec } from './brokerMessages.js';
import { describeQueueMismatch } from './describeQueueMismatch.js';
import { isInboxName } from './topology.js';

/** Broker replies that mean "someone else holds this": retrying does not help (invariant 1). */
export const refusalCodes = new Set([403, 405]);

/** The AMQP reply code of the first of `errors` that has one (an error or a channel's close). */
export function replyCode(...errors: unknown[]): number | undefined {
  for (const err of errors) {
    const code = (err as { code?: unknown } | undefined)?.code;
    if (typeof code === 'number') return code;
  }
  return undefined;
}

/** A consumer the broker refused (403, 405), as the error that says what to do. */
export function consumerRefused(hostId: string, spec: ConsumerSpec, err: Error): BridgeError {
  const denied = /refused for user/.test(err.message);
  return new BridgeError(
    ErrorCode.consumerRefused,
    `the broker refused to let this gateway consume ${spec.queue.name}: ${err.message}. ` +
      (denied
        ? "This gateway's broker login has no permission on this queue (R-H2); grant it with " +
          `\`agentbridge broker provision ${hostId} --apply\` (re-run after registering entities)`
        : `Another gateway already consumes this ${isInboxName(spec.queue.name) ? 'inbox' : 'queue'} ` +
          '(invariant 1: one consumer per inbox); ' +
          'stop that gateway, or give this one a different BRIDGE_HOME and entities'),
    // Held, not denied: the holder may be this gateway's own connection on a node that is lost
    // but not yet declared down by the cluster (see BrokerActorOptions.lockGraceMs).
    { cause: err, retryable: !denied },
  );
}

/**
 * A queue that is there with other arguments (406: another queue type, an older release's):
 * no retry fixes that, the operator does. At start the gateway stops with it; later the actor
 * keeps retrying with it (see BrokerActor.isFatal).
 */
export function queueMismatch(spec: ConsumerSpec, err: Error): BridgeError {
  const declaredAs = spec.queue.arguments['x-queue-type'] === 'quorum' ? 'quorum' : 'classic';
  return new BridgeError(ErrorCode.brokerNotSetUp, describeQueueMismatch(err.message, declaredAs), {
    retryable: true,
    cause: err,
  });
}
