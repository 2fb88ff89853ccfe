import { type Envelope, envelopeSchema } from '../wire/envelope.js';
import type { Store } from './openStore.js';

/** Keeps an undelivered message's envelope (with its body), in the current batch. */
export function putMessage(store: Store, recipient: string, envelope: Envelope): void {
  const json = JSON.stringify(envelope);
  store.batch.write('INSERT OR IGNORE INTO messages (msg_id, recipient, envelope) VALUES (?, ?, ?)', [
    envelope.msgId,
    recipient,
    json,
  ]);
}

export function readMessage(store: Store, msgId: string, recipient: string): Envelope | undefined {
  const row = store
    .prepare<[string, string], { envelope: string }>(
      'SELECT envelope FROM messages WHERE msg_id = ? AND recipient = ?',
    )
    .get(msgId, recipient);
  return row === undefined ? undefined : envelopeSchema.parse(JSON.parse(row.envelope));
}

/** Drops a delivered message's body, in the current batch: the log keeps digest and size only. */
export function purgeMessage(store: Store, msgId: string, recipient: string): void {
  store.batch.write('DELETE FROM messages WHERE msg_id = ? AND recipient = ?', [msgId, recipient]);
}

/** The trace a message belongs to, for replies that name it in `in_reply_to`. */
export function readTraceOfMessage(store: Store, msgId: string): string | undefined {
  const row = store
    .prepare<[string], { trace_id: string }>(
      'SELECT trace_id FROM events WHERE msg_id = ? ORDER BY seq LIMIT 1',
    )
    .get(msgId);
  return row?.trace_id;
}
