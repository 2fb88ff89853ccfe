import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import { brokerUri } from './federation.js';

/** A host id no concurrent test uses: queues are named after it on the shared broker. */
export function uniqueHostId(prefix: string): string {
  return `${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

/**
 * Deletes queues a test made on the shared broker (inboxes, control queues). Each delete gets
 * its own channel, so one that fails (already gone, still in exclusive use) spares the rest.
 */
export async function deleteQueues(names: readonly string[]): Promise<void> {
  if (names.length === 0) return;
  const connection = await amqp.connect(brokerUri);
  try {
    for (const name of names) {
      const channel = await connection.createChannel();
      channel.on('error', () => {});
      await channel.deleteQueue(name).catch(() => undefined);
      await channel.close().catch(() => undefined);
    }
  } finally {
    await connection.close().catch(() => undefined);
  }
}
