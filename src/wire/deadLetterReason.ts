import { OpenFailure } from './sealed.js';

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
  /** Its text came unsealed to a gateway that requires sealing (security.encryption, issue 34). */
  unsealed: 'unsealed',
  /** Sealed to other hosts, not this one (a replay to another host, a misroute). */
  notSealedToThisHost: OpenFailure.notSealedToThisHost,
  /** Sealed to a key of this host's that it does not keep (retired, or never its own). */
  unknownSealingKey: OpenFailure.unknownSealingKey,
  /** Its sealed part does not open: changed on the way, or sealed to another host's key. */
  tampered: OpenFailure.tampered,
} as const;
export type DeadLetterReason = (typeof DeadLetterReason)[keyof typeof DeadLetterReason];
