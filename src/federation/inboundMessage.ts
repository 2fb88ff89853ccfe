import type { Channel, ConsumeMessage } from 'amqplib';
import type { InboundMessage } from './brokerMessages.js';

/** A delivered AMQP message as the gateway handles it: settled once, on the channel it came on. */
export function inboundMessage(channel: Channel, message: ConsumeMessage): InboundMessage {
  let settled = false;
  const settle = (fn: () => void) => {
    if (settled) return;
    settled = true;
    try {
      fn();
    } catch {
      // The channel is gone; the broker redelivers the message and dedup catches it.
    }
  };
  return {
    content: message.content,
    exchange: message.fields.exchange,
    routingKey: message.fields.routingKey,
    messageId: message.properties.messageId as string | undefined,
    redelivered: message.fields.redelivered,
    headers: (message.properties.headers ?? {}) as Record<string, unknown>,
    ack: () => settle(() => channel.ack(message)),
    reject: () => settle(() => channel.nack(message, false, false)),
  };
}
