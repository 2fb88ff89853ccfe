import type { Federation } from '../federation/Federation.js';
import type { Logger } from '../log/logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Envelope } from '../wire/envelope.js';

/** A message an inbox had no room for, and who refused it. */
export interface RoomRefusal {
  /** The gid of the inbox's entity. */
  readonly recipient: string;
  /** Why, as the sender is told it. */
  readonly detail: string;
  /** The broker kept a copy in bridge.dlq itself (a classic inbox's reject-publish-dlx). */
  readonly keptByBroker: boolean;
  /** What the log line says besides the message's ids (the inbox's load, the error code). */
  readonly logFields?: Record<string, unknown>;
}

/**
 * A send that an inbox had no room for (R-H1), whichever side refused it: this gateway for an
 * inbox here (its cap or the sender's share), or the broker for a queue at its cap. Every such
 * refusal comes here, so it is counted once in bridge_dead_letters_total as `maxlen`, logged
 * once, and, federated, kept once in bridge.dlq: by the sender's gateway, unless the broker
 * kept it.
 */
export function deadLetterForRoom(
  deps: { metrics: Metrics; logger: Logger; federation?: Federation | undefined },
  envelope: Envelope,
  refusal: RoomRefusal,
): void {
  deps.metrics.deadLetters.inc({ reason: 'maxlen' });
  deps.logger.warn(
    { traceId: envelope.traceId, msgId: envelope.msgId, recipient: refusal.recipient, ...refusal.logFields },
    'refused a message for a full inbox (or its sender’s full share); dead-lettered as maxlen',
  );
  if (!refusal.keptByBroker)
    deps.federation?.deadLetter({ ...envelope, to: refusal.recipient }, 'maxlen', refusal.detail);
}
