/** The shared test broker (SPEC: RabbitMQ on 127.0.0.1:5672, guest/guest). */
export const brokerUri = process.env.BRIDGE_TEST_BROKER_URI ?? 'amqp://guest:guest@127.0.0.1:5672';

export { waitFor } from './waitFor.js';

/**
 * Removes the dead letters a test produced from the shared `bridge.dlq` (those published by
 * one of `hosts`, per their x-bridge-host header); everything else goes back untouched.
 */
export async function removeDeadLettersOf(hosts: readonly string[]): Promise<number> {
  const { default: amqp } = await import('amqplib');
  const connection = await amqp.connect(brokerUri, { noDelay: true });
  try {
    const channel = await connection.createChannel();
    let removed = 0;
    for (;;) {
      const message = await channel.get('bridge.dlq', { noAck: false });
      if (message === false) break;
      const host = message.properties.headers?.['x-bridge-host'];
      if (typeof host === 'string' && hosts.includes(host)) {
        channel.ack(message);
        removed++;
      }
    }
    await channel.close(); // the rest are requeued
    return removed;
  } finally {
    await connection.close();
  }
}
