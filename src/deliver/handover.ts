import type { Envelope } from '../wire/envelope.js';

// The hand-over protocol between an entity's deliveries and whoever takes them out of its
// inbox (a drain, an open send, an asking turn), as types only: entity actors, turns and the
// interfaces all speak it, and none of them needs the others' code for that.

/**
 * A received broker message, as far as a delivery needs it: acked once the store has it; its
 * bytes and headers as they came (signed, and sealed, by their sender) are what a dead letter of
 * it carries, so a requeue verifies and what was sealed stays sealed.
 */
export interface InboundHandle {
  ack(): void;
  readonly content: Buffer;
  readonly headers: Record<string, unknown>;
}

/**
 * Messages on their way to a main in a tool result. `confirm` once the response is out (they
 * are acked then: broker ack, body purged); `giveBack` if it never got there, and they are
 * held again for the next drain. Until either, they are neither lost nor offered twice; a
 * restart offers them again.
 */
export interface Handover {
  readonly envelopes: Envelope[];
  confirm(): void;
  giveBack(): void;
}

/** What an entity actor asks when an ANSWER arrives for it. */
export type AnswerClaim = { ok: true; resume(handover: Handover): void } | { ok: false; why: string };

/** The asking turns an ANSWER may resume (U2). */
export interface AnswerClaims {
  claim(recipient: string, answer: Envelope): AnswerClaim;
}
