import { z } from 'zod';
import type { IdempotentCall, KeyRecord } from '../wire/idempotentCall.js';
import type { Store } from './openStore.js';

const keyRowSchema = z.object({
  msg_id: z.string(),
  kind: z.string().nullable(),
  recipient: z.string().nullable(),
  digest: z.string().nullable(),
});

/**
 * The record of an entity's earlier call with this idempotency key, if any. Rows written
 * before calls were recorded (schema 3) have the msgId only.
 */
export function readKeyRecord(store: Store, sender: string, key: string): KeyRecord | undefined {
  const raw = store
    .prepare<[string, string], unknown>(
      'SELECT msg_id, kind, recipient, digest FROM idempotency WHERE sender = ? AND key = ?',
    )
    .get(sender, key);
  if (raw === undefined) return undefined;
  const row = keyRowSchema.parse(raw);
  if (row.kind === null || row.recipient === null || row.digest === null) return { msgId: row.msg_id };
  return { msgId: row.msg_id, call: { kind: row.kind, recipient: row.recipient, digest: row.digest } };
}

/** Records the first call made with a key, in the current batch; a later one changes nothing. */
export function recordIdempotencyKey(
  store: Store,
  sender: string,
  key: string,
  msgId: string,
  call: IdempotentCall,
): void {
  store.batch.write(
    'INSERT OR IGNORE INTO idempotency (sender, key, msg_id, kind, recipient, digest) VALUES (?, ?, ?, ?, ?, ?)',
    [sender, key, msgId, call.kind, call.recipient, call.digest],
  );
}
