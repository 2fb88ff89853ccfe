import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import { brokerUri } from './federation.js';

/** A host id no concurrent test uses: queues are named after it on the shared broker. */
export function uniqueHostId(prefix: string): string {
  return `${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/** How many queues `deleteQueues` deletes at once, each on a channel of its own. */
const parallelDeletes = 50;

/**
 * Deletes queues a test made on the shared broker (inboxes, control queues). Each delete gets
 * its own channel, so one that fails (already gone, still in exclusive use) spares the rest;
 * up to `parallelDeletes` at a time, so thousands take seconds.
 */
export async function deleteQueues(names: readonly string[]): Promise<void> {
  if (names.length === 0) return;
  const connection = await amqp.connect(brokerUri);
  try {
    const pending = [...names];
    const worker = async () => {
      for (let name = pending.shift(); name !== undefined; name = pending.shift()) {
        const channel = await connection.createChannel();
        // A failed delete (the queue gone already) closes only this channel; nothing to keep.
        channel.on('error', () => {});
        await channel.deleteQueue(name).catch(() => undefined);
        await channel.close().catch(() => undefined);
      }
    };
    await Promise.all(Array.from({ length: Math.min(parallelDeletes, pending.length) }, worker));
  } finally {
    await connection.close().catch(() => undefined);
  }
}
