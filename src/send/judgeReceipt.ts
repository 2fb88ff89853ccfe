import type { Receipt } from '../wire/receipt.js';

/** What the sender's gateway does with a receipt for one of its sends. */
export type ReceiptVerdict =
  | { readonly kind: 'record' }
  | {
      readonly kind: 'refuse';
      readonly reason: ReceiptRefusal;
      /** Why, for the log line. */
      readonly detail: string;
    };

export const ReceiptRefusal = {
  /** It names another recipient than the one the message was sent to. */
  wrongRecipient: 'wrong-recipient',
  /** It was written (signed) by a host other than the one the message went to. */
  wrongHost: 'wrong-host',
} as const;
export type ReceiptRefusal = (typeof ReceiptRefusal)[keyof typeof ReceiptRefusal];

/** What the judge needs to know of the send the receipt claims to be about. */
export interface SendOnRecord {
  readonly recipient: string;
  /** The recipient's host as the send recorded it, if it knew. */
  readonly recipientHost?: string | undefined;
}

/**
 * Decides whether a receipt may be recorded on a send (R-RC1): it must be for the send's own
 * recipient and come from the host that recipient lives on — the host recorded with the send,
 * or, when the send did not know it (a recipient addressed by a bare gid), the host the roster
 * places the recipient on. `from` is the host that wrote the receipt: its signer when signing
 * is on (admission has checked that the signer is the host it claims), this host for a
 * delivery of its own. Whether the receipt says anything new is the send machine's to decide.
 */
export function judgeReceipt(
  send: SendOnRecord,
  receipt: Receipt,
  from: string,
  rosterHostOf: (gid: string) => string | undefined,
): ReceiptVerdict {
  if (receipt.recipient !== send.recipient) {
    return {
      kind: 'refuse',
      reason: ReceiptRefusal.wrongRecipient,
      detail: `it is for ${receipt.recipient}, but message ${receipt.msgId} went to ${send.recipient}`,
    };
  }
  const expected = send.recipientHost ?? rosterHostOf(send.recipient);
  if (expected !== from) {
    return {
      kind: 'refuse',
      reason: ReceiptRefusal.wrongHost,
      detail:
        expected === undefined
          ? `${from} wrote it, and nothing places ${send.recipient} on ${from}`
          : `${from} wrote it, but message ${receipt.msgId} went to ${send.recipient} on ${expected}`,
    };
  }
  return { kind: 'record' };
}
