/**
 * Why a message ended dead-lettered instead of reaching its recipient: a delivery's end here,
 * or the reason a dead letter carries in bridge.dlq (its `x-bridge-reason` header).
 */
export const DeadLetterReason = {
  rejected: 'rejected',
  expired: 'expired',
  maxlen: 'maxlen',
  badSignature: 'bad-signature',
  unknownSender: 'unknown-sender',
  newerMajor: 'newer-major',
  deliveryLimit: 'delivery-limit',
  recipientGone: 'recipient-gone',
  /** Typed into the pane, and Enter never took it (R-DL6). */
  notSubmitted: 'not-submitted',
} as const;
export type DeadLetterReason = (typeof DeadLetterReason)[keyof typeof DeadLetterReason];
