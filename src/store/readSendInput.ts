import { type SendInput, sendInputSchema } from '../machines/sendMachine.js';
import type { Store } from './openStore.js';

/**
 * A send actor's recorded input (the payload of its first event), read without the rest of its
 * log; undefined when this host sent no such message, or its input does not parse.
 */
export function readSendInput(store: Store, msgId: string): SendInput | undefined {
  const row = store
    .prepare<[string], { data: string | null }>(
      "SELECT data FROM events WHERE actor_kind = 'send' AND actor_id = ? ORDER BY seq LIMIT 1",
    )
    .get(msgId);
  if (row?.data == null) return undefined;
  const parsed = sendInputSchema.safeParse(JSON.parse(row.data));
  return parsed.success ? parsed.data : undefined;
}
