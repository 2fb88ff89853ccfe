import type { Logger } from '../log/logger.js';
import type { DeliveryContext } from '../machines/deliveryMachine.js';
import type { Metrics } from '../metrics/metrics.js';
import { DeadLetterReason } from '../wire/deadLetterReason.js';

/**
 * What a delivery that went `dead-lettered` leaves besides its log row: one sample of
 * `bridge_dead_letters_total` by reason and one error line. Every dead end reports through
 * here, so the metric and the log cannot disagree on what was dead-lettered.
 *
 * `recipient` names the entity the message was for (its name, or its gid when it is gone).
 */
export function reportDeadLetter(
  deps: { metrics: Metrics; logger: Logger },
  context: DeliveryContext,
  recipient: string | null,
): void {
  const reason: DeadLetterReason = context.reason ?? DeadLetterReason.rejected;
  deps.metrics.deadLetters.inc({ reason });
  deps.logger.error(
    {
      traceId: context.traceId,
      msgId: context.msgId,
      recipient,
      reason,
      attempts: context.attempts,
      lastError: context.lastError,
    },
    'message dead-lettered; its body is kept for the operator',
  );
}
