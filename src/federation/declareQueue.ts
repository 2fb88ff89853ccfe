import type { Channel, Replies } from 'amqplib';
import type { QueueSpec } from './topology.js';

/**
 * Declares a queue with its bindings, and removes the bindings it no longer has. Returns the
 * broker's declare-ok: the queue's message and consumer counts.
 */
export async function declareQueue(channel: Channel, spec: QueueSpec): Promise<Replies.AssertQueue> {
  const declared = await channel.assertQueue(spec.name, {
    durable: spec.durable,
    exclusive: spec.exclusive,
    autoDelete: spec.autoDelete,
    arguments: spec.arguments,
  });
  for (const binding of spec.bindings) await channel.bindQueue(spec.name, binding.exchange, binding.key);
  for (const binding of spec.unbindings ?? [])
    await channel.unbindQueue(spec.name, binding.exchange, binding.key);
  return declared;
}
