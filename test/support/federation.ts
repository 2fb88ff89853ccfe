/** The shared test broker (SPEC: RabbitMQ on 127.0.0.1:5672, guest/guest). */
export const brokerUri = process.env.BRIDGE_TEST_BROKER_URI ?? 'amqp://guest:guest@127.0.0.1:5672';

/**
 * This test file's deployment (`broker.deployment`): its gateways hear each other's broadcasts
 * and PRESENCE, and no other file's, though every file shares the broker (each file loads this
 * module anew).
 */
export const testDeployment = `test-${Math.random().toString(36).slice(2, 10)}`;

/** What a test gateway on the shared broker is started with: the broker, and this file's deployment. */
export const brokerEnv = { BRIDGE_BROKER_URI: brokerUri, BRIDGE_DEPLOYMENT: testDeployment } as const;

import { waitFor } from './waitFor.js';

export { waitFor };

/**
 * A read of the shared broker's `bridge.dlq` (a CLI call, the console's listing), repeated until
 * `seen` finds in its result what the test looks for. Several tests read bridge.dlq at once, and
 * a reader holds the letters it reads until it is done (a RabbitMQ queue cannot be browsed), so
 * a letter another reader holds is out of sight for that moment. A call that did not see its
 * letter changed nothing, so it is simply made again.
 */
export function dlqUntilSeen<T>(
  what: string,
  read: () => Promise<T>,
  seen: (result: T) => boolean,
  ms = 30_000,
): Promise<T> {
  return waitFor(
    what,
    async () => {
      const result = await read();
      return seen(result) ? result : undefined;
    },
    ms,
  );
}

/**
 * Removes the dead letters a test produced from the shared `bridge.dlq` (those published by
 * one of `hosts`, per their x-bridge-host header); everything else goes back untouched.
 */
export function removeDeadLettersOf(hosts: readonly string[]): Promise<number> {
  return removeDeadLetters((headers) => {
    const host = headers['x-bridge-host'];
    return typeof host === 'string' && hosts.includes(host);
  });
}

/** Removes from the shared `bridge.dlq` the letters whose headers `doomed` picks; the rest go back. */
export async function removeDeadLetters(
  doomed: (headers: Record<string, unknown>) => boolean,
): Promise<number> {
  return (await takeDeadLetters(doomed)).length;
}

/** A dead letter as the broker holds it: its bytes, headers and message id. */
export interface HeldLetter {
  content: Buffer;
  headers: Record<string, unknown>;
  messageId: string | undefined;
}

/** Takes from the shared `bridge.dlq` the letters `picked` picks (by headers, message id); the rest go back. */
export async function takeDeadLetters(
  picked: (headers: Record<string, unknown>, messageId: string | undefined) => boolean,
): Promise<HeldLetter[]> {
  const { default: amqp } = await import('amqplib');
  const connection = await amqp.connect(brokerUri, { noDelay: true });
  try {
    const channel = await connection.createChannel();
    const taken: HeldLetter[] = [];
    for (;;) {
      const message = await channel.get('bridge.dlq', { noAck: false });
      if (message === false) break;
      const headers = message.properties.headers ?? {};
      if (picked(headers, message.properties.messageId)) {
        channel.ack(message);
        taken.push({ content: message.content, headers, messageId: message.properties.messageId });
      }
    }
    await channel.close(); // the rest are requeued
    return taken;
  } finally {
    await connection.close();
  }
}
