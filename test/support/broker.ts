import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';

/** The shared test broker (SPEC §12: guest may log in over loopback only). */
export const testBrokerUri = process.env.BRIDGE_TEST_BROKER_URI ?? 'amqp://guest:guest@127.0.0.1:5672';

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
  const connection = await amqp.connect(testBrokerUri);
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

/** Messages waiting in a queue, or undefined when it does not exist. */
export async function queueDepth(name: string): Promise<number | undefined> {
  const connection = await amqp.connect(testBrokerUri);
  try {
    const channel = await connection.createChannel();
    channel.on('error', () => {});
    const info = await channel.checkQueue(name).catch(() => undefined);
    return info?.messageCount;
  } finally {
    await connection.close().catch(() => undefined);
  }
}
