import { randomUUID } from 'node:crypto';
import amqp, { type ChannelModel } from 'amqplib';
import { afterEach, describe, expect, it } from 'vitest';
import { coalesceFrames } from '../../src/federation/coalesceFrames.js';
import { brokerUri } from '../support/federation.js';

/** Counts the socket writes (write or writev calls) under one amqplib connection. */
function countSocketWrites(model: ChannelModel): { calls: number } {
  const socket = (model as unknown as { connection: { stream: Record<string, unknown> } }).connection.stream;
  const counter = { calls: 0 };
  for (const name of ['_write', '_writev'] as const) {
    const original = socket[name] as ((...args: unknown[]) => unknown) | undefined;
    if (typeof original !== 'function') continue;
    socket[name] = function (this: unknown, ...args: unknown[]) {
      counter.calls++;
      return original.apply(this, args);
    };
  }
  return counter;
}

describe('coalesceFrames (the pinned amqplib, a real broker)', () => {
  const opened: ChannelModel[] = [];
  afterEach(async () => {
    for (const model of opened.splice(0)) await model.close().catch(() => {});
  });

  /** Publishes 50 messages in one tick on a confirm channel; returns the socket writes and what arrived. */
  const publishBurst = async (coalesce: boolean) => {
    const model = await amqp.connect(brokerUri, { noDelay: true });
    opened.push(model);
    if (coalesce) expect(coalesceFrames(model)).toBe(true);
    const channel = await model.createConfirmChannel();
    const queue = `coalesce-${randomUUID()}`;
    await channel.assertQueue(queue, { durable: false, autoDelete: false });
    const writes = countSocketWrites(model);
    const bodies = Array.from({ length: 50 }, (_, i) => Buffer.from(`message ${i} ${'x'.repeat(500)}`));
    for (const body of bodies) channel.publish('', queue, body, { persistent: true, headers: { 'x-n': 1 } });
    await channel.waitForConfirms();
    const calls = writes.calls;
    const received: string[] = [];
    for (;;) {
      const message = await channel.get(queue, { noAck: true });
      if (!message) break;
      received.push(message.content.toString());
    }
    await channel.deleteQueue(queue);
    return { calls, received, sent: bodies.map(String) };
  };

  it('the frames ready in one pass leave in a handful of writes, not one each; every message arrives whole and in order', async () => {
    const plain = await publishBurst(false);
    const coalesced = await publishBurst(true);
    // amqplib encodes a small publish's three frames in one buffer; uncoalesced, a write each.
    expect(plain.calls).toBeGreaterThanOrEqual(50);
    expect(coalesced.calls).toBeLessThan(10);
    expect(coalesced.received).toEqual(coalesced.sent);
    expect(plain.received).toEqual(plain.sent);
  });

  it('a connection not shaped as expected is left alone (false), not broken', () => {
    expect(coalesceFrames({} as ChannelModel)).toBe(false);
    expect(coalesceFrames({ connection: { muxer: {} } } as unknown as ChannelModel)).toBe(false);
  });
});
