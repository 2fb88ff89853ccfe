import type { QueueSpec } from './topology.js';

/** One message to publish. `mandatory` makes an unroutable message an error (invariant 2). */
export interface PublishRequest {
  exchange: string;
  routingKey: string;
  content: Buffer;
  messageId: string;
  mandatory: boolean;
  persistent: boolean;
  /** Per-message TTL (ms); the broker dead-letters it as expired at the queue head. */
  expirationMs?: number | undefined;
  headers?: Record<string, string | number | boolean> | undefined;
}

/** How a confirmed publish ended. Expected outcomes are values, not exceptions. */
export type PublishOutcome =
  | { ok: true }
  | { ok: false; reason: 'unroutable'; detail: string }
  | { ok: false; reason: 'rejected'; detail: string };

/** A received message with its ack bound to the channel it came on. */
export interface InboundMessage {
  readonly content: Buffer;
  readonly exchange: string;
  readonly routingKey: string;
  readonly messageId: string | undefined;
  readonly redelivered: boolean;
  readonly headers: Record<string, unknown>;
  /** Acks on the channel it arrived on; a no-op once that channel is gone (it will be redelivered). */
  ack(): void;
  /** Rejects without requeue: the queue's dead-letter exchange takes it. */
  reject(): void;
}

/** A message taken from a queue with basic.get (operator tooling), as plain values. */
export interface QueuedMessage {
  readonly content: Buffer;
  readonly routingKey: string;
  readonly messageId: string | undefined;
  readonly deliveryTag: number;
  readonly headers: Record<string, unknown>;
}

/**
 * What to do with a message `BrokerActor.takeEach` took: ack it (it is gone from the queue),
 * leave it (it goes back when the channel closes) and go on, or leave it and stop.
 */
export type TakeDecision = 'ack' | 'leave' | 'stop';

export interface ConsumerSpec {
  queue: QueueSpec;
  /** Quorum mode: an exclusive lock queue declared first, so a second gateway fails loudly. */
  lock?: QueueSpec | undefined;
  prefetch: number;
  exclusive: boolean;
  /** Start paused (see `setPaused`): the queue is declared, nothing is delivered yet. */
  paused?: boolean | undefined;
  /**
   * A channel of its own instead of one shared with up to `consumersPerChannel` others: the
   * gateway's control and roster consumers, so a channel error of some inbox (a delivery past
   * the broker's consumer_timeout) does not stall the host's control and presence with it.
   */
  ownChannel?: boolean | undefined;
  onMessage(message: InboundMessage): void;
}
