import { z } from 'zod';
import type { Store } from './openStore.js';

/** A dead letter of a cross-host message, still to be published to bridge.dlq. */
export interface OutboxDeadLetter {
  readonly msgId: string;
  /** The entity it was for: its inbox is where a requeue sends it. */
  readonly recipient: string;
  readonly reason: string;
  readonly detail: string;
}

/** Keeps a dead letter to publish, in the current batch (a later reason for the same replaces it). */
export function putOutboxDeadLetter(store: Store, letter: OutboxDeadLetter): void {
  store.batch.write(
    `INSERT INTO dead_letter_outbox (msg_id, recipient, reason, detail) VALUES (?, ?, ?, ?)
      ON CONFLICT (msg_id, recipient) DO UPDATE SET reason = excluded.reason, detail = excluded.detail`,
    [letter.msgId, letter.recipient, letter.reason, letter.detail],
  );
}

/** Drops a dead letter the broker has confirmed, in the current batch. */
export function dropOutboxDeadLetter(store: Store, msgId: string, recipient: string): void {
  store.batch.write('DELETE FROM dead_letter_outbox WHERE msg_id = ? AND recipient = ?', [msgId, recipient]);
}

const rowSchema = z.object({
  msg_id: z.string(),
  recipient: z.string(),
  reason: z.string(),
  detail: z.string(),
});

/** Every dead letter not yet published (committed rows), in the order they were made. */
export function readOutboxDeadLetters(store: Store): OutboxDeadLetter[] {
  return store
    .prepare('SELECT msg_id, recipient, reason, detail FROM dead_letter_outbox ORDER BY rowid')
    .all()
    .map((raw) => {
      const row = rowSchema.parse(raw);
      return { msgId: row.msg_id, recipient: row.recipient, reason: row.reason, detail: row.detail };
    });
}
