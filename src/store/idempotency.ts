import type { Store } from './openStore.js';

/** The msgId an entity's earlier call with this idempotency key produced, if any. */
export function readIdempotentMsgId(store: Store, sender: string, key: string): string | undefined {
  const row = store
    .prepare<[string, string], { msg_id: string }>(
      'SELECT msg_id FROM idempotency WHERE sender = ? AND key = ?',
    )
    .get(sender, key);
  return row?.msg_id;
}

export function recordIdempotencyKey(store: Store, sender: string, key: string, msgId: string): void {
  store.batch.write('INSERT OR IGNORE INTO idempotency (sender, key, msg_id) VALUES (?, ?, ?)', [
    sender,
    key,
    msgId,
  ]);
}
