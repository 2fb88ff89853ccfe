import { setTimeout as sleep } from 'node:timers/promises';

/** The shared test broker (SPEC: RabbitMQ on 127.0.0.1:5672, guest/guest). */
export const brokerUri = process.env.BRIDGE_TEST_BROKER_URI ?? 'amqp://guest:guest@127.0.0.1:5672';

/** Polls `probe` until it returns something other than undefined. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  ms = 15_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}
